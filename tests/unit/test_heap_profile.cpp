// jemalloc heap dumps read into the profile model (counts scaled as jeprof
// scales them, maps with files only, names parsed), malformed and cut dumps
// refused with the line, names demangled, allocator frames told apart.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdint>
#include <algorithm>

#include <cmath>
#include <fstream>
#include <string>
#include <thread>

#include "base/error.h"
#include "profile/heap_profile.h"
#include "profile/heaptrack_trace.h"
#include "profile/pprof.h"
#include "profile/profiles.h"
#include "profile/sites.h"
#include "profile/symbolizer.h"
#include "support.h"

using namespace memprofile;

namespace {
const char* kDump =
    "heap_v2/524288\n"
    "  t*: 3: 1572864 [0: 0]\n"
    "  t0: 3: 1572864 [0: 0]\n"
    "@ 0x7f0000001000 0x555500001234 0x555500001300\n"
    "  t*: 2: 1048576 [0: 0]\n"
    "  t0: 2: 1048576 [0: 0]\n"
    "@ 0x7f0000001000 0x555500001400\n"
    "  t*: 1: 1024 [0: 0]\n"
    "\n"
    "MAPPED_LIBRARIES:\n"
    "555500000000-555500001000 r--p 00000000 fe:00 42   /usr/local/bin/app\n"
    "555500001000-555500002000 r-xp 00001000 fe:00 42   /usr/local/bin/app\n"
    "7f0000000000-7f0000100000 rw-p 00000000 00:00 0 \n"
    "7f0000001000-7f0000002000 r-xp 00001000 fe:00 7    /usr/lib/libjemalloc.so.2 (deleted)\n"
    "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0    [stack]\n";
}  // namespace

TEST_CASE("jemalloc heap_v2: stacks, scaled counts and the file mappings", "[profile]") {
  HeapSnapshot s = parse_jemalloc_heap(kDump, "/p/jeprof.123.4.i4.heap");
  CHECK(s.sample_period == 524288);
  CHECK(s.pid == 123);
  CHECK(s.sequence == 4);
  CHECK(s.trigger == "i");
  REQUIRE(s.stacks.size() == 2);
  CHECK(s.stacks[0].pcs == std::vector<uint64_t>{0x7f0000001000, 0x555500001234, 0x555500001300});
  // 2 objects of 512 KiB each, sampled every 512 KiB: seen with p = 1 - e^-1.
  double factor = 1 / (1 - std::exp(-1.0));
  CHECK(s.stacks[0].bytes == Approx(1048576 * factor));
  CHECK(s.stacks[0].objects == Approx(2 * factor));
  // A small object is rarely sampled: scaled up by far more.
  CHECK(s.stacks[1].bytes > 1024 * 500);
  REQUIRE(s.maps.size() == 3);  // files only: not the anonymous map, not [stack]
  CHECK(s.maps[1].executable);
  CHECK(s.maps[1].offset == 0x1000);
  CHECK(s.maps[2].path == "/usr/lib/libjemalloc.so.2");  // " (deleted)" dropped
}

TEST_CASE("jemalloc dumps cut short or malformed: the file and the line", "[profile]") {
  std::string dump = kDump;
  std::string no_maps = dump.substr(0, dump.find("MAPPED_LIBRARIES"));
  CHECK_THROWS_WITH(parse_jemalloc_heap(no_maps, "a.heap"), Catch::Contains("a.heap: truncated: no MAPPED_LIBRARIES"));
  CHECK_THROWS_WITH(parse_jemalloc_heap(dump.substr(0, dump.size() - 3), "b.heap"),
                    Catch::Contains("truncated: the last line is cut short"));
  std::string open_stack = dump.substr(0, dump.find("  t*: 1: 1024")) + "\n";
  CHECK_THROWS_WITH(parse_jemalloc_heap(open_stack, "c.heap"), Catch::Contains("truncated: the last stack has no counts"));
  CHECK_THROWS_WITH(parse_jemalloc_heap("heap_v2/x\n", "d.heap"), Catch::Contains("d.heap: line 1: malformed header"));
  CHECK_THROWS_WITH(parse_jemalloc_heap("heap_v1\n", "e.heap"), Catch::Contains("not a jemalloc heap profile"));
  std::string bad = "heap_v2/1\n  t*: 1: 1 [0: 0]\n@ 0x10 zz\n  t*: 1: 1 [0: 0]\nMAPPED_LIBRARIES:\n";
  CHECK_THROWS_WITH(parse_jemalloc_heap(bad, "f.heap"), Catch::Contains("f.heap: line 3: malformed stack"));
  std::string deep = "heap_v2/1\n  t*: 1: 1 [0: 0]\n@";
  for (size_t i = 0; i <= kMaxStackFrames; ++i) deep += " 0x10";
  deep += "\n";
  CHECK_THROWS_WITH(parse_jemalloc_heap(deep, "g.heap"), Catch::Contains("more than 1024 frames"));
}

TEST_CASE("jemalloc dump names: PREFIX.PID.SEQ.KIND.heap", "[profile]") {
  uint64_t pid = 0, seq = 0;
  std::string kind;
  CHECK(parse_jemalloc_name("/out/jeprof.7.12.m3.heap", pid, seq, kind));
  CHECK((pid == 7 && seq == 12 && kind == "m"));
  CHECK(parse_jemalloc_name("/out/my.prefix.7.41.f.heap", pid, seq, kind));
  CHECK((pid == 7 && seq == 41 && kind == "f"));
  CHECK_FALSE(parse_jemalloc_name("/out/app.heap", pid, seq, kind));
  CHECK_FALSE(parse_jemalloc_name("/out/jeprof.x.1.i1.heap", pid, seq, kind));
}

// gperftools' heap profiler, as heap-profile-table.cc writes it (2.10):
// every allocation counted, live and allocated both.
const char* kGperftoolsDump =
    "heap profile:      3:  1049600 [     5:  2098176] @ heapprofile\n"
    "     2:  1048576 [     3:  1572864] @ 0x7f0000001000 0x555500001234 0x555500001300\n"
    "     1:     1024 [     1:     1024] @ 0x7f0000001000 0x555500001400\n"
    "     0:        0 [     1:   524288] @\n"
    "\n"
    "MAPPED_LIBRARIES:\n"
    "555500000000-555500001000 r--p 00000000 fe:00 42   /usr/local/bin/app\n"
    "555500001000-555500002000 r-xp 00001000 fe:00 42   /usr/local/bin/app\n";

TEST_CASE("gperftools heap profile: counts as recorded, allocated too, names with the pid", "[profile]") {
  HeapSnapshot s = parse_heap_dump(kGperftoolsDump, "/out/tcmalloc.77_91.0003.heap");
  CHECK(s.backend == "tcmalloc");
  CHECK((s.pid == 91 && s.sequence == 3));
  CHECK(s.sample_period == 0);
  CHECK(s.has_allocated);
  REQUIRE(s.stacks.size() == 2);  // the stack it could not unwind counts in the totals only
  CHECK(s.stacks[0].pcs == std::vector<uint64_t>{0x7f0000001000, 0x555500001234, 0x555500001300});
  CHECK(s.stacks[0].bytes == 1048576);
  CHECK(s.stacks[0].alloc_bytes == 1572864);
  CHECK(s.total_bytes == 1049600);
  REQUIRE(s.maps.size() == 2);
  uint64_t pid = 0, seq = 0;
  CHECK(parse_gperftools_name("/out/tcmalloc.77.0001.heap", pid, seq));
  CHECK((pid == 77 && seq == 1));
  CHECK_FALSE(parse_gperftools_name("/out/jeprof.7.12.m3.heap", pid, seq));
  CHECK_FALSE(parse_gperftools_name("/out/heap.0001.heap", pid, seq));
  // tcmalloc's sampled heap (GetHeapSample) is scaled as jemalloc's.
  std::string sampled = std::string(kGperftoolsDump);
  sampled.replace(sampled.find("heapprofile"), 11, "heap_v2/524288");
  HeapSnapshot t = parse_gperftools_heap(sampled, "s.heap");
  CHECK(t.stacks[0].bytes > 1048576);
  CHECK_FALSE(t.has_allocated);
  // 2.10 prints object counts as int32: past 2^31 allocations they read
  // negative, and are taken modulo 2^32.
  std::string wrapped = std::string(kGperftoolsDump);
  wrapped.replace(wrapped.find("[     5:"), 8, "[-2147483000:");
  CHECK(parse_gperftools_heap(wrapped, "w.heap").total_bytes == 1049600);
  // Cut short, or not gperftools': one line naming the file.
  std::string dump = kGperftoolsDump;
  CHECK_THROWS_WITH(parse_gperftools_heap(dump.substr(0, dump.find("MAPPED")), "a.heap"),
                    Catch::Contains("a.heap: truncated: no MAPPED_LIBRARIES"));
  CHECK_THROWS_WITH(parse_gperftools_heap("heap profile: 1: 2 [3: 4] @ heap/2\n", "b.heap"),
                    Catch::Contains("b.heap: line 1: a kind of heap profile memprofile does not read"));
  CHECK_THROWS_WITH(parse_gperftools_heap("heap profile: 1: 2 [3: 4] @ heapprofile\n  x: 1\n", "c.heap"),
                    Catch::Contains("c.heap: line 2: malformed stack"));
}

TEST_CASE("names demangled: C++, Rust legacy and v0, plain C kept", "[profile]") {
  CHECK(demangle("_ZN4shop6LedgerIlE13grow_steadilyEm") == "shop::Ledger<long>::grow_steadily");
  CHECK(demangle("_ZN5sites13grow_steadily17h0123456789abcdefE") == "sites::grow_steadily");
  CHECK(demangle("_RNvCs1234_5sites13grow_steadily") == "sites::grow_steadily");
  CHECK(demangle("grow_steadily") == "grow_steadily");
  CHECK(demangle("_Znot-mangled") == "_Znot-mangled");
}

TEST_CASE("allocator, runtime and libc frames are skipped when a stack is folded", "[profile]") {
  auto frame = [](std::string fn, std::string file, std::string module) {
    Frame f;
    f.function = std::move(fn);
    f.file = std::move(file);
    f.module = std::move(module);
    return f;
  };
  CHECK(is_allocator_frame(frame("", "", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")));
  CHECK(is_allocator_frame(frame("__libc_malloc", "", "/usr/lib/x86_64-linux-gnu/libc.so.6")));
  CHECK(is_allocator_frame(frame("operator new(unsigned long)", "", "/app")));
  CHECK(is_allocator_frame(frame("malloc", "", "/app")));  // a statically linked allocator
  CHECK(is_allocator_frame(frame("alloc::raw_vec::finish_grow", "", "/app")));
  CHECK(is_allocator_frame(frame("<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
                                 "/rustc/59807616/library/alloc/src/vec/mod.rs", "/app")));
  // Rust's std as Debian's rustc and rust-src place it, instantiated in the app.
  CHECK(is_allocator_frame(frame("<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
                                 "/usr/src/rustc-1.63.0/library/alloc/src/vec/spec_from_elem.rs", "/app")));
  CHECK(is_allocator_frame(frame("x", "/root/.rustup/toolchains/nightly/lib/rustlib/src/rust/library/core/src/ptr.rs", "/app")));
  CHECK_FALSE(is_allocator_frame(frame("leaky_rs::keep", "/usr/src/app/library/alloc/src/pool.rs", "/app")));
  CHECK_FALSE(is_allocator_frame(frame("leaky_rs::keep", "/usr/src/rustc-1.63.0/app/library/std/x.rs", "/app")));
  CHECK_FALSE(is_allocator_frame(frame("free_list_push", "/src/list.c", "/app")));
  CHECK_FALSE(is_allocator_frame(frame("shop::Ledger<long>::grow_steadily", "/src/sites.cpp", "/app")));
  CHECK(is_profiler_frame(frame("", "", "/opt/memprofile/lib/libheaptrack_preload.so")));
}

TEST_CASE("allocator frames by rule: any crate's GlobalAlloc or Allocator, the shims, the allocators' own", "[profile]") {
  auto fn = [](std::string name) {
    Frame f;
    f.function = std::move(name);
    f.file = "src/lib.rs";
    f.module = "/app";
    return is_allocator_frame(f);
  };
  // The trait's methods, whatever the crate (not a list of crates).
  CHECK(fn("<tikv_jemallocator::Jemalloc as core::alloc::global::GlobalAlloc>::alloc"));
  CHECK(fn("<tikv_jemallocator::Jemalloc as core::alloc::global::GlobalAlloc>::realloc"));
  CHECK(fn("<mimalloc::MiMalloc as core::alloc::global::GlobalAlloc>::alloc_zeroed"));
  CHECK(fn("<some_new_crate::Arena as core::alloc::global::GlobalAlloc>::dealloc"));
  CHECK(fn("<my_app::Counting as std::alloc::GlobalAlloc>::alloc"));
  CHECK(fn("<bumpalo::Bump as core::alloc::Allocator>::allocate"));
  CHECK(fn("<&my_app::Pool as alloc::alloc::Allocator>::grow"));
  // Rust's shims and the allocators' own functions.
  for (const char* name : {"__rust_alloc", "__rust_alloc_zeroed", "__rust_dealloc", "__rust_realloc", "__rg_alloc",
                           "__rdl_alloc", "je_malloc", "_rjem_mallocx", "_rjem_je_prof_backtrace", "imalloc_body",
                           "prof_alloc_prep", "mi_malloc_aligned", "_mi_heap_malloc_zero", "tc_malloc", "tc_new"})
    CHECK(fn(name));
  // The user's own code, even where it names the trait or a method alone.
  CHECK_FALSE(fn("planted_growth"));
  CHECK_FALSE(fn("my_app::alloc_cache"));
  CHECK_FALSE(fn("<my_app::Cache as my_app::Fill>::alloc"));
  CHECK_FALSE(fn("<my_app::Pool as core::alloc::global::GlobalAlloc>::stats"));
  CHECK_FALSE(fn("my_app::GlobalAlloc::new"));
}

namespace {
// A raw heaptrack trace in a scratch file.
std::string write_trace(const testing::Scratch& dir, const std::string& name, const std::string& text) {
  std::string path = dir / name;
  std::ofstream(path) << text;
  return path;
}
}  // namespace

TEST_CASE("heaptrack raw traces: live blocks per call path, snapshots at the timestamps", "[profile]") {
  testing::Scratch dir;
  // Two call paths under main; a block freed, one reallocated in place, a
  // free of a block from before tracking (ignored), a module reload.
  std::string path = write_trace(dir, "heaptrack.1.raw",
                                 "v 10400 3\n"
                                 "x 8 /app/bin\n"
                                 "X /app/bin --serve\n"
                                 "I 1000 5e2990\n"
                                 "m 1 -\n"
                                 "m 1 x 555500000000 0 7a8 1000 35d\n"
                                 "m f linux-vdso.so.1 7f0000000000 0 1522\n"
                                 "t 555500001100 0\n"   // 1: main
                                 "t 555500001200 1\n"   // 2: grow, from main
                                 "t 555500001300 1\n"   // 3: churn, from main
                                 "+ 400 2 aa0\n"
                                 "c 10\n"
                                 "R 3c6\n"
                                 "+ 400 2 bb0\n"
                                 "+ 100 3 cc0\n"
                                 "- cc0\n"
                                 "- dead\n"
                                 "c 80\n"
                                 "- bb0\n"
                                 "+ 800 2 bb0\n"          // realloc in place: free, then the new size
                                 "m 1 -\n"
                                 "m 1 x 555500000000 0 7a8 1000 35d\n"
                                 "+ 10 0 ee0\n"           // no stack
                                 "c 100\n");
  std::vector<HeapSnapshot> snaps = read_heaptrack_trace(path);
  REQUIRE(snaps.size() >= 2);
  CHECK(snaps.front().backend == "heaptrack");
  CHECK(snaps.front().call_sites);
  CHECK(snaps.front().total_bytes == 0x400);
  const HeapSnapshot& last = snaps.back();
  CHECK(last.time_ms == 0x100);
  CHECK(last.trigger.empty());
  CHECK(last.total_bytes == 0x400 + 0x800 + 0x10);
  // The grow path's stack, innermost first; the vdso has no file.
  bool found = false;
  for (const auto& s : last.stacks)
    if (s.bytes == 0x400 + 0x800) {
      found = true;
      CHECK(s.stack() == std::vector<uint64_t>{0x555500001200, 0x555500001100});
      CHECK(s.objects == 2);
    }
  CHECK(found);
  REQUIRE(last.maps.size() >= 2);
  CHECK(last.maps[0].path == "/app/bin");
  CHECK(last.maps[0].offset_is_vaddr);
  for (const auto& m : last.maps) CHECK(m.path != "linux-vdso.so.1");
}

TEST_CASE("heaptrack raw traces: what comes after the last timestamp is in the last snapshot", "[profile]") {
  testing::Scratch dir;
  // The timer's last tick fell while a temporary block was live; the
  // program freed it before it exited, within the same millisecond.
  std::string path = write_trace(dir, "heaptrack.1.raw",
                                 "v 10400 3\n"
                                 "x 8 /app/bin\n"
                                 "m 1 -\n"
                                 "m 1 x 555500000000 0 7a8 1000 35d\n"
                                 "t 555500001100 0\n"
                                 "t 555500001200 1\n"
                                 "+ 400 1 aa0\n"
                                 "c 10\n"
                                 "+ 100 2 bb0\n"
                                 "c 80\n"
                                 "- bb0\n"
                                 "+ 400 1 cc0\n");
  std::vector<HeapSnapshot> snaps = read_heaptrack_trace(path);
  // The tick's snapshot at 0x80 (0x500, with the temporary) is replaced by
  // the state at the end, which has no later timestamp of its own.
  REQUIRE(snaps.size() == 2);
  CHECK(snaps[0].total_bytes == 0x400);
  CHECK(snaps.back().time_ms == 0x80);
  CHECK(snaps.back().total_bytes == 0x800);  // the temporary gone, the growth in
  // A last tick at the same millisecond as the end changes nothing.
  std::string same = write_trace(dir, "heaptrack.2.raw",
                                 "v 10400 3\nx 8 /app/bin\nm 1 -\nm 1 x 555500000000 0 7a8 1000 35d\n"
                                 "t 555500001100 0\n+ 400 1 aa0\nc 10\n+ 100 1 bb0\nc 80\n");
  CHECK(read_heaptrack_trace(same).size() == 2);
  CHECK(read_heaptrack_trace(same).back().total_bytes == 0x500);
}

TEST_CASE("heaptrack at exit: a teardown that spans a timestamp is left out whole, the growth before it stays",
          "[profile]") {
  testing::Scratch dir;
  // Four blocks from one call path, a snapshot each (50 ms apart); then
  // the destructors free them, and the timer ticks when one of the four
  // is gone (3/4 of the peak: not under half yet).
  std::string trace =
      "v 10400 3\nx 8 /app/bin\nm 1 -\nm 1 x 555500000000 0 7a8 1000 35d\nt 555500001100 0\n"
      "+ 400 1 a00\nc 0\n+ 400 1 b00\nc 32\n+ 400 1 c00\nc 64\n+ 400 1 d00\nc 96\n"
      "- a00\nc c8\n- b00\n- c00\n- d00\nc ca\n";
  LoadedProfiles loaded = load_profiles({write_trace(dir, "heaptrack.7.raw", trace)}, "");
  REQUIRE(loaded.processes.size() == 1);
  const auto& snaps = loaded.processes[0].snaps;
  REQUIRE(snaps.size() == 4);
  CHECK(snaps.back().total_bytes == 0x1000);
  REQUIRE(loaded.notes[7].size() == 1);
  CHECK_THAT(loaded.notes[7][0], Catch::Contains("(2 snapshots)"));
  // A program that ends full (a copy of a running one) keeps its end, and
  // a fall that does not end under half the peak is not a teardown.
  std::string full = trace.substr(0, trace.find("- a00")) + "- a00\nc c8\n";
  loaded = load_profiles({write_trace(dir, "heaptrack.8.raw", full)}, "");
  REQUIRE(loaded.processes.size() == 1);
  CHECK(loaded.processes[0].snaps.size() == 5);
  CHECK(loaded.notes[8].empty());
}

TEST_CASE("heaptrack traces refused: old format, interpreted, malformed, undefined traces", "[profile]") {
  testing::Scratch dir;
  CHECK_THROWS_WITH(read_heaptrack_trace(write_trace(dir, "a", "v 10200 2\n")), Catch::Contains("file format 2"));
  CHECK_THROWS_WITH(read_heaptrack_trace(write_trace(dir, "b", "v 10400 3\ns 3 abc\n")),
                    Catch::Contains("an interpreted heaptrack trace"));
  CHECK_THROWS_WITH(read_heaptrack_trace(write_trace(dir, "c", "v 10400 3\nt 10\n")),
                    Catch::Contains("c: line 2: malformed trace line"));
  CHECK_THROWS_WITH(read_heaptrack_trace(write_trace(dir, "d", "v 10400 3\n+ 10 4 aa\n")),
                    Catch::Contains("allocation from trace 4, not yet defined"));
  CHECK_THROWS_WITH(read_heaptrack_trace(write_trace(dir, "e", "v 10400 3\nt 12345678901234567 0\n")),
                    Catch::Contains("malformed trace line"));
  CHECK_THROWS_WITH(read_heaptrack_trace(write_trace(dir, "f", "v 10400 3\nQ 1\n")), Catch::Contains("unknown record 'Q'"));
  CHECK_THROWS_WITH(read_heaptrack_trace(write_trace(dir, "g", "hello\n")), Catch::Contains("not a heaptrack trace"));
  // A last line cut short is the end of the trace, said as such.
  std::vector<HeapSnapshot> cut =
      read_heaptrack_trace(write_trace(dir, "h", "v 10400 3\nt 10 0\n+ 10 1 aa\nc 5\n+ 20 1 b"));
  CHECK(cut.back().trigger == "cut");
  CHECK(cut.back().total_bytes == 0x10);
}

namespace {
// A chain of `depth` traces, each one deeper, with one allocation (freed or
// not) at every level: a deeply recursive program.
std::string deep_chain(size_t depth, bool freed) {
  std::string t = "v 10400 3\n";
  char line[96];
  for (size_t i = 1; i <= depth; ++i) {
    std::snprintf(line, sizeof line, "t %zx %zx\n+ 10 %zx %zx\n", 0x1000 + i, i - 1, i, 0x100000 + 16 * i);
    t += line;
    if (freed) {
      std::snprintf(line, sizeof line, "- %zx\n", 0x100000 + 16 * i);
      t += line;
    }
  }
  return t + "c 10\n";
}
}  // namespace

TEST_CASE("heaptrack stacks: as deep as jemalloc's (1024 frames), never cut; deeper is refused", "[profile]") {
  testing::Scratch dir;
  std::vector<HeapSnapshot> ok = read_heaptrack_trace(write_trace(dir, "ok", deep_chain(kMaxStackFrames, false)));
  REQUIRE(ok.back().stacks.size() == kMaxStackFrames);
  size_t deepest = 0;
  for (const auto& s : ok.back().stacks) deepest = std::max(deepest, s.stack().size());
  CHECK(deepest == kMaxStackFrames);
  // Every snapshot shares one copy of each path.
  CHECK(ok.front().stacks.front().shared_pcs == ok.back().stacks.front().shared_pcs);
  CHECK_THROWS_WITH(read_heaptrack_trace(write_trace(dir, "deep", deep_chain(kMaxStackFrames + 1, true))),
                    Catch::Contains("line " + std::to_string(3 * kMaxStackFrames + 3) + ": an allocation's call stack is 1025 frames deep; memprofile reads at most 1024"));
}

TEST_CASE("heaptrack traces of many deep paths: refused at the frame budget, not read into gigabytes", "[profile]") {
  testing::Scratch dir;
  // A trunk 1000 deep, then 9000 leaves allocating: 9 million frames of
  // paths from a 0.3 MB trace.
  std::string t = "v 10400 3\n";
  char line[96];
  for (size_t i = 1; i <= 1000; ++i) {
    std::snprintf(line, sizeof line, "t %zx %zx\n", 0x1000 + i, i - 1);
    t += line;
  }
  for (size_t i = 0; i < 9000; ++i) {
    std::snprintf(line, sizeof line, "t %zx 3e8\n+ 10 %zx %zx\n", 0x9000 + i, 1001 + i, 0x100000 + 16 * i);
    t += line;
  }
  CHECK_THROWS_WITH(read_heaptrack_trace(write_trace(dir, "wide", t + "c 10\n")),
                    Catch::Contains("the call paths that allocated have more than 8388608 frames in all"));
}

TEST_CASE("heaptrack sizes: past an address space refused, sums saturate instead of wrapping", "[profile]") {
  testing::Scratch dir;
  CHECK_THROWS_WITH(read_heaptrack_trace(write_trace(dir, "huge", "v 10400 3\nt 10 0\n+ ffffffffffffffff 1 aa\n+ 2 1 bb\nc 5\n")),
                    Catch::Contains("line 3: an allocation of 18446744073709551615 bytes, more than an address space holds"));
  // 2^48 bytes, 40,000 times: more than int64 holds, said as the most it can.
  std::string t = "v 10400 3\nt 10 0\n";
  char line[64];
  for (int i = 0; i < 40000; ++i) {
    std::snprintf(line, sizeof line, "+ 1000000000000 1 %x\n", 0x1000 + 16 * i);
    t += line;
  }
  std::vector<HeapSnapshot> s = read_heaptrack_trace(write_trace(dir, "many", t + "c 5\n"));
  CHECK(s.back().total_bytes == static_cast<double>(INT64_MAX));
}

TEST_CASE("leak suspects: rose and never fell; flat intervals and a reallocation's dip do not clear one", "[profile]") {
  auto site = [](std::vector<double> bytes) {
    Site s;
    s.bytes = std::move(bytes);
    return s.leak_suspect();
  };
  CHECK(site({100, 200, 300, 400}));
  CHECK(site({100, 200, 200, 400}));       // a flat interval: dumps at uneven times
  CHECK(site({100, 3200, 3100, 6400}));    // a growing vector caught mid-reallocation
  CHECK_FALSE(site({100, 3200, 1600, 6400}));  // half given back: not a leak's shape
  CHECK_FALSE(site({100, 5000, 0, 100}));  // temporary work
  CHECK_FALSE(site({500, 500, 500}));      // large and steady
  CHECK_FALSE(site({400}));                // one snapshot says nothing of growth
  CHECK_FALSE(site({0, 0, 0, 0, 32768}));  // a temporary block live at the last snapshot
  CHECK(site({0, 0, 0, 100, 200}));        // a leak that began late, seen twice
  CHECK(site({100, 400}));                 // --base and one profile: one interval is all there is
  // Two steps among many flat intervals: a bounded cache that filled across
  // a snapshot, or an arena charged to whichever call needed one.
  CHECK_FALSE(site({0, 30, 64, 64, 64, 64, 64, 64, 64}));
  CHECK_FALSE(site({64, 64, 64, 1088, 1088, 1088, 1088, 1088, 2112, 2112, 2112, 2112}));
  CHECK(site({0, 0, 0, 0, 0, 0, 0, 0, 100, 200, 300}));  // began late, and went on
  CHECK(site({0, 100, 100, 200, 200, 300, 300}));      // dumps twice as often as it grows
}

TEST_CASE("one report's stacks: each distinct one kept once across dumps, a budget for the whole run", "[profile]") {
  StackInterner stacks;
  HeapSnapshot a = parse_jemalloc_heap(kDump, "/p/jeprof.1.0.i0.heap", &stacks);
  HeapSnapshot b = parse_jemalloc_heap(kDump, "/p/jeprof.1.1.i1.heap", &stacks);
  CHECK(stacks.distinct() == 2);
  REQUIRE(a.stacks.size() == 2);
  CHECK(a.stacks[0].shared_pcs == b.stacks[0].shared_pcs);
  CHECK(a.stacks[0].pcs.empty());
  CHECK(a.stacks[0].stack() == std::vector<uint64_t>{0x7f0000001000, 0x555500001234, 0x555500001300});
  // The budget counts every dump read: several under the file limit add up.
  StackInterner small(4 * sizeof(StackSample) + (64 + 3 * 8 + 3 * 160) + (64 + 2 * 8 + 2 * 160));  // the two dumps exactly
  parse_jemalloc_heap(kDump, "/p/jeprof.1.0.i0.heap", &small);
  parse_jemalloc_heap(kDump, "/p/jeprof.1.1.i1.heap", &small);
  CHECK_THROWS_WITH(parse_jemalloc_heap(kDump, "/p/jeprof.1.2.i2.heap", &small),
                    Catch::Contains("/p/jeprof.1.2.i2.heap: the profiles read so far hold more than 0 MiB of stacks (5 samples, "
                                    "2 distinct stacks): memprofile's limit for one report"));
}

TEST_CASE("heaptrack: an allocation with no frames (trace 0) is a sample without locations in --pprof, not a crash",
          "[profile]") {
  testing::Scratch dir;
  std::string path = write_trace(dir, "heaptrack.1.raw",
                                 "v 10400 3\n"
                                 "t 555500001100 0\n"
                                 "+ 10 1 aa0\n"
                                 "+ 20 0 bb0\n"  // trace 0: no frames
                                 "c 10\n");
  auto snaps = read_heaptrack_trace(path);
  REQUIRE(!snaps.empty());
  bool frameless = false;
  for (const auto& s : snaps.back().stacks) frameless |= s.stack().empty();
  CHECK(frameless);
  Symbolizer symbolizer([](const std::string&) { return -1; });
  std::string out = dir / "p.pb.gz";
  write_pprof(snaps.back(), symbolizer, out);
  std::string bytes = testing::read_file(out);
  REQUIRE(bytes.size() > 2);
  CHECK(static_cast<unsigned char>(bytes[0]) == 0x1f);
  CHECK(static_cast<unsigned char>(bytes[1]) == 0x8b);
}

TEST_CASE("a profile named twice is read once, and said; an empty dump among several is left out, said", "[profile]") {
  testing::Scratch dir;
  testing::make_dirs(dir / "pod");
  write_trace(dir, "pod/jeprof.5.0.i0.heap", kDump);
  std::string second = write_trace(dir, "pod/jeprof.5.1.i1.heap", kDump);
  LoadedProfiles once = load_profiles({dir / "pod"}, "");
  // The directory, then one of its files again, then the same file by
  // another path: two dumps of pid 5, not four.
  LoadedProfiles twice = load_profiles({dir / "pod", second, dir / "pod/../pod/jeprof.5.1.i1.heap"}, "");
  REQUIRE(twice.processes.size() == 1);
  CHECK(twice.processes[0].snaps.size() == once.processes[0].snaps.size());
  CHECK(twice.processes[0].snaps.size() == 2);
  REQUIRE(twice.notes[0].size() == 2);
  CHECK_THAT(twice.notes[0][0], Catch::StartsWith("read once: " + second + " (named more than once)"));
  // Created, not yet written (a dump in progress as the report ran).
  write_trace(dir, "pod/jeprof.5.2.i2.heap", "");
  LoadedProfiles with_empty = load_profiles({dir / "pod"}, "");
  REQUIRE(with_empty.processes.size() == 1);
  CHECK(with_empty.processes[0].snaps.size() == 2);
  REQUIRE(with_empty.notes[0].size() == 1);
  CHECK_THAT(with_empty.notes[0][0], Catch::Contains("left out, cut short: ") && Catch::EndsWith("jeprof.5.2.i2.heap: empty"));
  // Named alone, an empty dump is the error.
  CHECK_THROWS_AS(load_profiles({dir / "pod/jeprof.5.2.i2.heap"}, ""), FileError);
}

TEST_CASE("a dump the budget removes after the directory was listed is left out, said, and no error", "[profile]") {
  // A live output directory: the disk budget (or the profiler's rotation)
  // removes dumps while report reads the others. A remover from the end
  // races the reader from the start; report must read what is left.
  testing::Scratch dir;
  testing::make_dirs(dir / "pod");
  int removed_said = 0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::vector<std::string> files;
    for (int i = 0; i < 300; ++i)
      files.push_back(write_trace(dir, "pod/jeprof.9." + std::to_string(1000 + i) + ".i" + std::to_string(i) + ".heap", kDump));
    std::thread remover([&files] {
      for (size_t i = files.size(); i-- > files.size() / 2;) std::remove(files[i].c_str());
    });
    LoadedProfiles loaded;
    std::string error;
    try {
      loaded = load_profiles({dir / "pod"}, "");
    } catch (const std::exception& e) {
      error = e.what();
    }
    remover.join();
    CHECK(error.empty());
    if (!error.empty()) break;
    REQUIRE(loaded.processes.size() == 1);
    for (const auto& n : loaded.notes[0])
      if (n.find("removed after the directory was listed") != std::string::npos) ++removed_said;
    for (const auto& f : files) std::remove(f.c_str());
  }
  CHECK(removed_said > 0);
}

TEST_CASE("a process of the tree with a record and no snapshot read is named in a note", "[profile]") {
  testing::Scratch dir;
  testing::make_dirs(dir / "pod");
  write_trace(dir, "pod/jeprof.100.0.i0.heap", kDump);
  write_trace(dir, "pod/jeprof.100.1.i1.heap", kDump);
  write_trace(dir, "pod/memprofile-proc.100.json", R"({"pid":100,"parent":1,"program":"/app/server"})");
  write_trace(dir, "pod/memprofile-proc.103.json", R"({"pid":103,"parent":100,"program":"/app/server"})");
  LoadedProfiles loaded = load_profiles({dir / "pod"}, "");
  REQUIRE(loaded.processes.size() == 1);
  REQUIRE(loaded.notes[0].size() == 1);
  CHECK_THAT(loaded.notes[0][0], Catch::StartsWith("pid 103 (/app/server, forked from 100) is a process of the tree") &&
                                     Catch::Contains("no snapshot in the profiles read"));
}

TEST_CASE("a record is read only as the process its name says", "[profile]") {
  testing::Scratch dir;
  testing::make_dirs(dir / "pod");
  write_trace(dir, "pod/jeprof.100.0.i0.heap", kDump);
  write_trace(dir, "pod/jeprof.100.1.i1.heap", kDump);
  write_trace(dir, "pod/memprofile-proc.100.json", R"({"pid":100,"parent":1,"program":"/app/server"})");
  // Another process's record under its own name claims pid 100.
  write_trace(dir, "pod/memprofile-proc.99999.json", R"({"pid":100,"parent":1,"program":"/usr/sbin/forged"})");
  write_trace(dir, "pod/jeprof.100.1.i1.heap.mem.json", R"({"pid":100,"time":2,"rss":1048576})");
  write_trace(dir, "pod/jeprof.100.0.i0.heap.mem.json", R"({"pid":100,"time":1,"rss":1048576})");
  // A memory record of pid 200 that says it is 100's, to make 100 grow.
  write_trace(dir, "pod/memprofile-mem.200.2.mem.json", R"({"pid":100,"time":3,"rss":89128960000})");
  LoadedProfiles loaded = load_profiles({dir / "pod"}, "");
  REQUIRE(loaded.processes.size() == 1);
  CHECK(loaded.processes[0].info.program == "/app/server");
  CHECK(loaded.memory.size() == 2);
  int left_out = 0;
  for (const auto& n : loaded.notes[0]) left_out += n.rfind("left out: ", 0) == 0 && n.find("its name pid") != std::string::npos;
  CHECK(left_out == 2);
}

TEST_CASE("two pods' pid 1 are two processes; two collections of one pod are one", "[profile]") {
  testing::Scratch dir;
  for (const char* pod : {"podA", "podB"}) {
    testing::make_dirs(dir / pod);
    write_trace(dir, std::string(pod) + "/jeprof.1.0.i0.heap", kDump);
    write_trace(dir, std::string(pod) + "/jeprof.1.1.i1.heap", kDump);
  }
  write_trace(dir, "podA/memprofile-proc.1.json", R"({"pid":1,"parent":0,"program":"/app/a","started":1000})");
  write_trace(dir, "podB/memprofile-proc.1.json", R"({"pid":1,"parent":0,"program":"/app/b","started":2000})");
  LoadedProfiles two = load_profiles({dir / "podA", dir / "podB"}, "");
  REQUIRE(two.processes.size() == 2);
  CHECK(two.processes[0].snaps.size() == 2);
  CHECK(two.processes[1].snaps.size() == 2);
  CHECK(two.processes[0].info.program != two.processes[1].info.program);
  CHECK(two.processes[0].info.origin == dir / "podA");
  CHECK(two.processes[1].info.origin == dir / "podB");
  // Without records, the inputs alone tell them apart.
  testing::Scratch bare;
  for (const char* pod : {"p1", "p2"}) {
    testing::make_dirs(bare / pod);
    write_trace(bare, std::string(pod) + "/jeprof.1.0.i0.heap", kDump);
  }
  CHECK(load_profiles({bare / "p1", bare / "p2"}, "").processes.size() == 2);
  // The same pod collected twice: the same record (pid and start), one process.
  testing::make_dirs(dir / "later");
  write_trace(dir, "later/jeprof.1.2.i2.heap", kDump);
  write_trace(dir, "later/memprofile-proc.1.json", R"({"pid":1,"parent":0,"program":"/app/a","started":1000})");
  LoadedProfiles same = load_profiles({dir / "podA", dir / "later"}, "");
  REQUIRE(same.processes.size() == 1);
  CHECK(same.processes[0].snaps.size() == 3);
  CHECK(same.processes[0].info.origin.empty());
  // Two replicas started in the same second: their boot and start ticks
  // tell them apart.
  for (const char* pod : {"r1", "r2"}) {
    testing::make_dirs(dir / pod);
    write_trace(dir, std::string(pod) + "/jeprof.1.0.i0.heap", kDump);
  }
  write_trace(dir, "r1/memprofile-proc.1.json", R"({"pid":1,"program":"/app/a","started":5,"boot":"b-1","start_ticks":700})");
  write_trace(dir, "r2/memprofile-proc.1.json", R"({"pid":1,"program":"/app/a","started":5,"boot":"b-1","start_ticks":701})");
  CHECK(load_profiles({dir / "r1", dir / "r2"}, "").processes.size() == 2);
  // One input: nothing changes.
  LoadedProfiles one = load_profiles({dir / "podA"}, "");
  REQUIRE(one.processes.size() == 1);
  CHECK(one.processes[0].info.key == 1);
}
