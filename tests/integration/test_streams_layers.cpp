// Integration tier: real layers. The cases on synthetic inputs are
// tests/unit/test_streams.cpp.
// The streaming layer: decompression, tar parsing, and flattening rules.
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

