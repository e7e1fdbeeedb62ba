// Bounded work on crafted inputs (#12): a few hundred bytes must not cost
// minutes or gigabytes. Each case runs the real CLI in a child and asserts a
// CPU-time bound and a peak-RSS bound. CPU time, not wall time: another job
// on the machine makes the child wait, not work (RLIMIT_CPU ends it past the
// bound; a child blocked for good is killed after kHangSeconds of wall time,
// far beyond what load can add). The peak comes from GNU time's wait4 on memprofile: a process
// forked from this one would count this process's pages, since Linux keeps
// the pre-exec high-water mark in ru_maxrss.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "archive_builder.h"
#include "elf_builder.h"
#include "base/json_text.h"
#include "support.h"

using testing::Scratch;
using testing::TarWriter;

namespace {

using testing::Bounded;
using testing::require_bounded;
using testing::run_bounded;

constexpr long kFileRssKb = 64 * 1024;    // any image on a file
constexpr long kStdinRssKb = 128 * 1024;  // any image from standard input

void put32(std::string& f, size_t at, uint32_t v) { std::memcpy(&f[at], &v, 4); }

// A 1 KiB x86_64 shared object whose DT_HASH chain for every name loops
// back on itself, with nchain = 0xffffffff: a lookup that trusts nchain
// walks 2^32 steps.
std::string looping_hash_elf() {
  std::string f(1024, '\0');
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_phoff = 64;
  eh.e_ehsize = sizeof eh;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = 2;
  std::memcpy(&f[0], &eh, sizeof eh);
  Elf64_Phdr ph[2]{};
  ph[0].p_type = PT_LOAD;
  ph[0].p_flags = PF_R;
  ph[0].p_filesz = ph[0].p_memsz = f.size();
  ph[0].p_align = 4096;
  ph[1].p_type = PT_DYNAMIC;
  ph[1].p_offset = ph[1].p_vaddr = 512;
  ph[1].p_filesz = ph[1].p_memsz = 7 * sizeof(Elf64_Dyn);
  std::memcpy(&f[64], ph, sizeof ph);
  const char strtab[] = "\0libc.so.6\0x";  // symbol 1 is "x": never the name looked up
  std::memcpy(&f[320], strtab, sizeof strtab);
  Elf64_Sym sym{};
  sym.st_name = 11;
  sym.st_shndx = 1;
  std::memcpy(&f[384 + sizeof sym], &sym, sizeof sym);
  // nbucket 1, nchain 0xffffffff, bucket[0] = 1, chain[0] = 0, chain[1] = 1.
  put32(f, 448, 1);
  put32(f, 452, 0xffffffffu);
  put32(f, 456, 1);
  put32(f, 460, 0);
  put32(f, 464, 1);
  Elf64_Dyn dyn[7] = {{DT_NEEDED, {1}}, {DT_STRTAB, {320}}, {DT_STRSZ, {sizeof strtab}}, {DT_SYMTAB, {384}},
                      {DT_SYMENT, {sizeof(Elf64_Sym)}}, {DT_HASH, {448}}, {DT_NULL, {0}}};
  std::memcpy(&f[512], dyn, sizeof dyn);
  return f;
}

// A new-format ld.so.cache of `size` bytes whose every entry names libc.so.6
// and points its path at one string of `value_len` bytes.
std::string shared_string_cache(size_t size, size_t value_len) {
  const std::string magic = "glibc-ld.so.cache1.1";
  const size_t header = magic.size() + 4 + 4 + 20, entry = 24;
  std::string strings = std::string("libc.so.6") + '\0' + std::string(value_len, 'a') + '\0';
  size_t n = (size - header - strings.size()) / entry;
  std::string f(header + n * entry, '\0');
  std::memcpy(&f[0], magic.data(), magic.size());
  put32(f, magic.size(), static_cast<uint32_t>(n));
  put32(f, magic.size() + 4, static_cast<uint32_t>(strings.size()));
  uint32_t key = static_cast<uint32_t>(f.size()), value = key + 10;
  for (size_t i = 0; i < n; ++i) {
    size_t e = header + i * entry;
    put32(f, e, 0x0303);  // x86-64, libc6
    put32(f, e + 4, key);
    put32(f, e + 8, value);
  }
  return f + strings;
}

std::string docker_archive(const std::string& layer, size_t listings, const std::string& extra_name = "",
                           const std::string& extra = "") {
  std::string config = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Entrypoint\":[\"/app\"]}}";
  std::string layers;
  for (size_t i = 0; i < listings; ++i) layers += std::string(i ? "," : "") + "\"l/layer.tar\"";
  std::string manifest = "[{\"Config\":\"config.json\",\"RepoTags\":[\"x:1\"],\"Layers\":[" + layers + "]}]";
  TarWriter t;
  if (!extra_name.empty()) t.add(extra_name, extra);
  t.add("config.json", config).add("l/layer.tar", layer).add("manifest.json", manifest);
  return t.finish();
}

}  // namespace

TEST_CASE("bounds: a DT_HASH chain that loops is cut at the file's size, with a one-line error") {
  Scratch s;
  testing::write_file(s / "loop.so", looping_hash_elf(), 0755);
  Bounded b = run_bounded({"check", s / "loop.so"}, 20);
  require_bounded(b, kFileRssKb);
  CHECK(b.exit_code == 2);
  CHECK_THAT(b.err, Catch::Contains("loop.so") && Catch::Contains("DT_HASH chain"));
  CHECK(testing::lines(b.err).size() == 1);
}

TEST_CASE("bounds: ld.so.cache entries sharing one long string are not copied per entry") {
  for (size_t value_len : {size_t{1} << 20, size_t{4000}}) {
    Scratch s;
    testing::write_file(s / "root/etc/ld.so.cache", shared_string_cache(4u << 20, value_len));
    testing::write_file(s / "root/app", testing::ElfBuilder{}.build(), 0755);
    Bounded b = run_bounded({"check", "--root", s / "root", "/app"}, 30);
    INFO("string of " << value_len << " bytes");
    require_bounded(b, kFileRssKb);
    CHECK((b.exit_code == 0 || b.exit_code == 1));
  }
}

TEST_CASE("bounds: a layer listed many times is decoded once; past the layer limit, a one-line error") {
  TarWriter layer;
  layer.add("app", testing::ElfBuilder{}.build(), '0', 0755);
  for (int i = 0; i < 2000; ++i) layer.add("f/" + std::to_string(i), "x");
  Scratch s;
  testing::write_file(s / "many.tar", docker_archive(layer.finish(), 400));
  Bounded b = run_bounded({"preflight", "--json", s / "many.tar"}, 60);
  require_bounded(b, kFileRssKb);
  CHECK((b.exit_code == 0 || b.exit_code == 1));

  testing::write_file(s / "too-many.tar", docker_archive(layer.finish(), 5000));
  Bounded t = run_bounded({"preflight", s / "too-many.tar"}, 60);
  require_bounded(t, kFileRssKb);
  CHECK(t.exit_code == 2);
  CHECK_THAT(t.err, Catch::Contains("too-many.tar") && Catch::Contains("5000 layers") && Catch::Contains("at most 500"));
}

TEST_CASE("bounds: a path repeated in a layer replaces its entry; over-long names are skipped") {
  TarWriter layer;
  layer.add("app", testing::ElfBuilder{}.build(), '0', 0755);
  for (int i = 0; i < 100000; ++i) layer.add("same/name", "x");
  layer.add(std::string(5000, 'n'), "x");  // longer than PATH_MAX (a GNU long name)
  Scratch s;
  testing::write_file(s / "dup.tar", docker_archive(layer.finish(), 1));
  Bounded b = run_bounded({"preflight", "--json", s / "dup.tar"}, 60);
  require_bounded(b, kFileRssKb);
  CHECK((b.exit_code == 0 || b.exit_code == 1));
  Bounded in = run_bounded({"preflight", "--json", "-"}, 60, s / "dup.tar");
  require_bounded(in, kStdinRssKb);
  CHECK(in.exit_code == b.exit_code);
}

TEST_CASE("bounds: from stdin, a blob no manifest lists does not count, whatever its size") {
  TarWriter layer;
  layer.add("app", testing::ElfBuilder{}.build(), '0', 0755);
  Scratch s;
  std::string junk(6u << 20, 'J');  // larger than any manifest, and not a tar
  testing::write_file(s / "img.tar", docker_archive(layer.finish(), 1, "attestation.bin", junk));
  Bounded file = run_bounded({"preflight", "--json", s / "img.tar"}, 60);
  Bounded in = run_bounded({"preflight", "--json", "-"}, 60, s / "img.tar");
  require_bounded(file, kFileRssKb);
  require_bounded(in, kStdinRssKb);
  CHECK((file.exit_code == 0 || file.exit_code == 1));
  CHECK(in.exit_code == file.exit_code);
}

TEST_CASE("bounds: an index with no image says so") {
  Scratch s;
  testing::write_file(s / "empty/oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}");
  testing::write_file(s / "empty/index.json", "{\"schemaVersion\":2,\"manifests\":[]}");
  Bounded b = run_bounded({"preflight", s / "empty"}, 20);
  CHECK(b.exit_code == 2);
  CHECK_THAT(b.err, Catch::Contains("holds no image"));
}

TEST_CASE("json: names that are not UTF-8 are written losslessly as \\udcXX escapes") {
  using memprofile::json_text;
  CHECK(json_text(nlohmann::json("a\xff" "b")) == "\"a\\udcffb\"");
  CHECK(json_text(nlohmann::json("caf\xc3\xa9 \xe2\x82\xac")) == "\"caf\xc3\xa9 \xe2\x82\xac\"");  // valid UTF-8 unchanged
  CHECK(json_text(nlohmann::json("\xed\xa0\x80")) == "\"\\udced\\udca0\\udc80\"");  // an encoded surrogate is not UTF-8
  CHECK(json_text(nlohmann::json("\xc0\xaf")) == "\"\\udcc0\\udcaf\"");  // nor an overlong '/'
  CHECK(json_text(nlohmann::json{{"k\x80", {1, "\t\"\\"}}}) == "{\"k\\udc80\":[1,\"\\t\\\"\\\\\"]}");

  // End to end: a layer entry whose name is not UTF-8 shows in preflight --json.
  Scratch s;
  testing::OciImage img;
  img.layer(TarWriter().add("app", testing::ElfBuilder{}.build(), '0', 0755).add("../esc\xff", "x").finish());
  img.write(s / "img");
  Bounded b = run_bounded({"preflight", "--json", s / "img"}, 30);
  INFO(b.err);
  CHECK((b.exit_code == 0 || b.exit_code == 1));
  testing::RunResult r = testing::run_memprofile({"preflight", "--json", s / "img"});
  CHECK_THAT(r.out, Catch::Contains("esc\\udcff"));
  // Valid JSON to a reader that takes escaped surrogates (Python), and the
  // name's bytes come back through surrogateescape.
  testing::write_file(s / "out.json", r.out);
  testing::write_file(s / "check.py",
                      "import json, sys\n"
                      "doc = json.load(open(sys.argv[1]))\n"
                      "names = [a.encode('utf-8', 'surrogateescape') for a in doc['anomalies']]\n"
                      "sys.exit(0 if any(b'esc\\xff' in n for n in names) else 1)\n");
  testing::RunResult py = testing::run("python3 " + testing::quote(s / "check.py") + " " + testing::quote(s / "out.json"));
  INFO(py.err);
  CHECK(py.exit_code == 0);
}

TEST_CASE("tar: GNU tar's sparse files, in every format it writes, are read as extracted") {
  Scratch s;
  // The program, then a hole, then one byte at 2 MiB: tar --sparse stores
  // only the data segments and a map.
  testing::write_file(s / "root/app", testing::ElfBuilder{}.build(), 0755);
  REQUIRE(testing::run("printf x | dd of=" + testing::quote(s / "root/app") +
                       " bs=1 seek=2097152 conv=notrunc status=none").exit_code == 0);
  for (std::string format : {"--format=gnu", "--format=pax --sparse-version=0.0", "--format=pax --sparse-version=0.1",
                             "--format=pax --sparse-version=1.0"}) {
    INFO(format);
    std::string tar = s / "layer.tar";
    REQUIRE(testing::run("tar -C " + testing::quote(s / "root") + " --sparse " + format + " -cf " + testing::quote(tar) +
                         " app").exit_code == 0);
    testing::OciImage img;
    img.layer(testing::read_file(tar));
    std::string dir = s / ("img" + std::to_string(std::hash<std::string>{}(format)));
    img.write(dir);
    testing::RunResult r = testing::run_memprofile({"preflight", "--json", dir});
    INFO(r.err);
    REQUIRE((r.exit_code == 0 || r.exit_code == 1));
    auto j = nlohmann::json::parse(testing::lines(r.out).at(0));
    CHECK(j["target"]["linkage"] == "dynamic");
    CHECK(j["anomalies"].empty());
  }
}
