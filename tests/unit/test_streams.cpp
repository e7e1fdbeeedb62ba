// The streaming layer: decompression, tar parsing, and flattening rules.
#include <catch2/catch.hpp>

#include "archive_builder.h"
#include "base/error.h"
#include "image/image_tree.h"
#include "image/layer.h"
#include "base/stream.h"
#include "base/tar_reader.h"

using namespace memprofile;
using testing::TarWriter;

namespace {

std::string read_all(Reader& r) {
  std::string out;
  char buf[4096];
  for (size_t n; (n = r.read(buf, sizeof buf)) > 0;) out.append(buf, n);
  return out;
}

LayerSummary summarize(const std::string& bytes) {
  MemReader r(bytes.data(), bytes.size());
  return summarize_layer(r, "layer");
}

std::string pax(const std::vector<std::pair<std::string, std::string>>& recs) {
  std::string out;
  for (const auto& [k, v] : recs) {
    std::string body = " " + k + "=" + v + "\n";
    size_t len = body.size() + 1;
    while (std::to_string(len).size() + body.size() != len) ++len;
    out += std::to_string(len) + body;
  }
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
