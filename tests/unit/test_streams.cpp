// The streaming layer: decompression, tar parsing, and flattening rules.
#include <catch2/catch.hpp>

#include "archive_builder.h"
#include "error.h"
#include "image_tree.h"
#include "layer.h"
#include "stream.h"
#include "tar_reader.h"

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

TEST_CASE("layer: ELF files are summarised, setuid and capabilities kept") {
  std::string elf = testing::read_file(testing::fixture("dynamic"));
  std::string tar = TarWriter()
                        .add("PaxHeaders/x", pax({{"SCHILY.xattr.security.capability", "\x01\x02"}}), 'x')
                        .add("usr/bin/app", elf, '0', 04755)
                        .add("etc/passwd", "root:x:0:0::/root:/bin/sh\n")
                        .finish();
  LayerSummary s = summarize(tar);
  REQUIRE(s.nodes.size() == 2);
  const LayerNode& app = s.nodes[0];
  CHECK(app.path == "/usr/bin/app");
  CHECK(app.mode == 04755);
  CHECK(app.file_caps);
  REQUIRE(app.facts);
  REQUIRE(app.facts->elf);
  CHECK(app.facts->elf->linkage == Linkage::Dynamic);
  CHECK(app.facts->elf->needed == std::vector<std::string>{"libc.so.6"});
  REQUIRE(s.nodes[1].facts);
  CHECK(s.nodes[1].facts->content == "root:x:0:0::/root:/bin/sh\n");
  CHECK(s.diff_id == sha256_hex(tar));
}

TEST_CASE("layer: a large ELF file is summarised from a sparse capture") {
  // rust-crt-static is megabytes: its dynamic segment lies far beyond the
  // prefix kept from the stream.
  std::string elf = testing::read_file(testing::fixture("rust-crt-static"));
  REQUIRE(elf.size() > (2u << 20));
  LayerSummary s = summarize(testing::gzip(TarWriter().add("app", elf, '0', 0755).finish()));
  REQUIRE(s.nodes[0].facts);
  REQUIRE(s.nodes[0].facts->elf);
  CHECK(s.nodes[0].facts->elf->linkage == Linkage::StaticPie);
  LayerSummary go = summarize(TarWriter().add("go", testing::read_file(testing::fixture("go-cgo")), '0', 0755).finish());
  REQUIRE(go.nodes[0].facts);
  REQUIRE(go.nodes[0].facts->elf);
  CHECK(go.nodes[0].facts->elf->go);
  CHECK(go.nodes[0].facts->elf->go_version.rfind("go1.", 0) == 0);
  CHECK(go.nodes[0].facts->elf->needed == std::vector<std::string>{"libc.so.6"});
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
