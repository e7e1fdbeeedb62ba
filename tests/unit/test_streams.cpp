// Unit tier: synthetic inputs only. The cases on real layers are
// tests/integration/test_streams_layers.cpp.
// The streaming layer on hand-built input: decompression, tar parsing, and
// flattening rules.
#include <catch2/catch.hpp>

#include "archive_builder.h"
#include "base/error.h"
#include "image/image_tree.h"
#include "image/layer.h"
#include "base/stream.h"
#include "base/tar_reader.h"

using namespace memprofile;
using testing::pax;
using testing::summarize;
using testing::TarWriter;

namespace {

std::string read_all(Reader& r) {
  std::string out;
  char buf[4096];
  for (size_t n; (n = r.read(buf, sizeof buf)) > 0;) out.append(buf, n);
  return out;
}

}  // namespace

TEST_CASE("streams: concatenated gzip members decompress like gzip -dc") {
  std::string data = testing::gzip("hello ") + testing::gzip("world");
  MemReader in(data.data(), data.size());
  Compression c;
  auto r = decompress(in, "x", 1 << 20, &c);
  CHECK(c == Compression::Gzip);
  CHECK(read_all(*r) == "hello world");
}

TEST_CASE("streams: plain bytes pass through and are hashed") {
  std::string data = "abc";
  MemReader in(data.data(), data.size());
  HashingReader h(in);
  auto r = decompress(h, "x", 100);
  CHECK(read_all(*r) == "abc");
  CHECK(h.hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("streams: the output bound stops a decompression bomb") {
  std::string bomb = testing::gzip(std::string(1 << 20, '\0'));
  MemReader in(bomb.data(), bomb.size());
  auto r = decompress(in, "bomb", 1000);
  CHECK_THROWS_WITH(read_all(*r), Catch::Contains("bomb: decompresses to more than 1000 bytes"));
}

TEST_CASE("tar: PAX path, size and file capabilities override the header") {
  std::string long_name = std::string(150, 'd') + "/file";
  std::string tar = TarWriter()
                        .add("PaxHeaders/x", pax({{"path", long_name}, {"SCHILY.xattr.security.capability", "\x01"}}), 'x')
                        .add("short", "content", '0', 0755)
                        .finish();
  MemReader in(tar.data(), tar.size());
  TarReader t(in, "t");
  TarEntry e;
  REQUIRE(t.next(e));
  CHECK(e.name == long_name);
  CHECK(e.file_caps);
  CHECK(e.mode == 0755);
  char buf[16];
  CHECK(std::string(buf, t.read(buf, sizeof buf)) == "content");
  CHECK_FALSE(t.next(e));
}

TEST_CASE("tar: GNU long names") {
  std::string long_name = std::string(200, 'n');
  std::string tar = TarWriter().add("././@LongLink", long_name + '\0', 'L').add("x", "1").finish();
  MemReader in(tar.data(), tar.size());
  TarReader t(in, "t");
  TarEntry e;
  REQUIRE(t.next(e));
  CHECK(e.name == long_name);
}

TEST_CASE("tar: a bad checksum names the offset") {
  std::string tar = TarWriter().add("x", "1").finish();
  tar[0] = 'y';
  MemReader in(tar.data(), tar.size());
  TarReader t(in, "layer.tar");
  TarEntry e;
  CHECK_THROWS_WITH(t.next(e), Catch::Contains("layer.tar: bad tar header checksum at offset 0"));
}

TEST_CASE("flatten: a file replaces a directory and its children; a directory over a directory merges") {
  ImageTree t;
  t.apply(summarize(TarWriter().add("a/", "", '5', 0755).add("a/x", "1").add("b/", "", '5', 0700).add("b/keep", "k").finish()));
  t.apply(summarize(TarWriter().add("a", "now a file").add("b/", "", '5', 0755).add("b/new", "n").finish()));
  CHECK(t.lstat("/a").kind == FsNode::Kind::Regular);
  CHECK(t.lstat("/a/x").kind == FsNode::Kind::Missing);
  CHECK(t.lstat("/b").mode == 0755);
  CHECK(t.lstat("/b/keep").kind == FsNode::Kind::Regular);
  CHECK(t.lstat("/b/new").kind == FsNode::Kind::Regular);
}

TEST_CASE("flatten: parents are implied for entries without directory entries") {
  ImageTree t;
  t.apply(summarize(TarWriter().add("deep/er/file", "1").finish()));
  CHECK(t.lstat("/deep/er").kind == FsNode::Kind::Directory);
}

TEST_CASE("budget: names, nodes and the tree are charged to one budget; past it, a one-line error naming the layer") {
  TarWriter tar;
  for (int i = 0; i < 20000; ++i) tar.add("dir" + std::to_string(i % 50) + "/" + std::string(60, 'n') + std::to_string(i), "x");
  std::string bytes = tar.finish();
  LayerLimits small;
  small.budget = std::make_shared<MemoryBudget>(1 << 20);
  MemReader r(bytes.data(), bytes.size());
  CHECK_THROWS_WITH(summarize_layer(r, "big.tar", small),
                    Catch::Contains("big.tar: the layers' file") && Catch::Contains("more than 1 MiB of memory"));
  CHECK(small.budget->used() == 0);  // what the failed layer held is given back

  // Within a budget, the charge follows what is kept: the layer's list is
  // given back as the tree takes it, and everything when the tree goes.
  LayerLimits enough;
  enough.budget = std::make_shared<MemoryBudget>(64 << 20);
  {
    MemReader again(bytes.data(), bytes.size());
    LayerSummary s = summarize_layer(again, "big.tar", enough);
    uint64_t layer_only = enough.budget->used();
    CHECK(layer_only > 20000 * sizeof(LayerNode));
    ImageTree t(enough.budget);
    t.apply(std::move(s));
    CHECK(t.lstat("/dir7/" + std::string(60, 'n') + "7").kind == FsNode::Kind::Regular);
    CHECK(enough.budget->used() < layer_only + 20050 * 160);
    LayerLimits tiny;
    tiny.budget = std::make_shared<MemoryBudget>(256 << 10);
    ImageTree other(tiny.budget);
    MemReader third(bytes.data(), bytes.size());
    CHECK_THROWS_WITH(other.apply(summarize_layer(third, "big.tar", enough)),
                      Catch::Contains("big.tar: the image's files and directories need more than 0 MiB"));
  }
  CHECK(enough.budget->used() == 0);
}

TEST_CASE("budget: a path listed twice keeps its last entry where the first was, and says so once") {
  auto s = summarize(TarWriter().add("a", "1").add("b", "2").add("a", "3", '0', 0700).add(".wh.c").add(".wh.c").finish());
  REQUIRE(s.nodes.size() == 3);
  CHECK(s.nodes[0].path == "/a");
  CHECK(s.nodes[0].mode == 0700);
  CHECK(s.nodes[1].path == "/b");
  CHECK(s.nodes[2].kind == LayerNode::Kind::Whiteout);
  REQUIRE(s.anomalies.size() == 1);
  CHECK_THAT(s.anomalies[0], Catch::Contains("1 path listed more than once (e.g. /a)"));
}
