// bytehound's .dat read into the profile model: the chunk framing (LZ4 and
// stored), speedy's encoding, blocks matched by allocation id (pointers are
// reused), reallocation chains, the bytes held per span whatever the order
// events were written in, partial backtraces, the newest maps snapshot, and
// damaged or hostile files refused in one line with the byte offset.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/stream.h"
#include "profile/bytehound_dat.h"

using namespace memprofile;

namespace {

// The writer's side of speedy, as bytehound's preload library uses it.
struct Events {
  std::string s;
  Events& u8(uint8_t v) { return s.push_back(static_cast<char>(v)), *this; }
  Events& u32(uint32_t v) { return s.append(reinterpret_cast<const char*>(&v), 4), *this; }
  Events& u64(uint64_t v) { return s.append(reinterpret_cast<const char*>(&v), 8), *this; }
  Events& str(const std::string& v) { return u32(static_cast<uint32_t>(v.size())), s.append(v), *this; }
  Events& varint(uint64_t v) {  // speedy's: leading 1-bits count the bytes that follow
    if (v < 0x80) return u8(static_cast<uint8_t>(v));
    if (v < 0x4000) return u8(static_cast<uint8_t>(0x80 | v >> 8)).u8(static_cast<uint8_t>(v));
    u8(0xff);
    return u64(v);
  }
  Events& header(uint64_t t0 = 1000000, uint32_t pid = 42) {
    u32(0).u64(1).u64(2).u64(t0).u64(t0).u64(1700000000).u64(0).u32(pid).str(std::string("app\0", 4)).str("/app");
    return str("x86_64").u64(1).u8(8);
  }
  Events& backtrace(uint64_t id, const std::vector<uint64_t>& pcs) {
    u32(5).u64(id).u32(static_cast<uint32_t>(pcs.size()));
    for (uint64_t pc : pcs) u64(pc);
    return *this;
  }
  Events& body(uint64_t ptr, uint64_t size, uint64_t bt) { return u64(ptr).u64(size).u64(bt).u32(7).u32(0).u32(0).u64(0); }
  Events& alloc(uint64_t thread, uint64_t n, uint64_t ts, uint64_t ptr, uint64_t size, uint64_t bt) {
    return u32(20).u64(thread).u64(n).u64(ts), body(ptr, size, bt);
  }
  Events& realloc(uint64_t thread, uint64_t n, uint64_t ts, uint64_t old, uint64_t ptr, uint64_t size, uint64_t bt) {
    return u32(21).u64(thread).u64(n).u64(ts).u64(old), body(ptr, size, bt);
  }
  Events& free(uint64_t thread, uint64_t n, uint64_t ts, uint64_t ptr) {
    return u32(22).u64(thread).u64(n).u64(ts).u64(ptr).u64(0).u32(7);
  }
  Events& file(uint64_t ts, const std::string& path, const std::string& contents) {
    return u32(23).u64(ts).str(path).u64(contents.size()), s.append(contents), *this;
  }
};

// Chunks: stored (kind 2) pieces of `piece` bytes, or one LZ4 block of
// literals only (kind 1), which any LZ4 decoder reads.
std::string stored(const std::string& stream, size_t piece = 1 << 20) {
  std::string out;
  for (size_t at = 0; at < stream.size(); at += piece) {
    std::string part = stream.substr(at, piece);
    uint32_t n = static_cast<uint32_t>(part.size());
    out.push_back(2);
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += part;
  }
  return out;
}

std::string lz4_literals(const std::string& stream) {
  std::string block;
  size_t n = stream.size();
  block.push_back(static_cast<char>(n >= 15 ? 0xf0 : n << 4));
  if (n >= 15) {
    size_t rest = n - 15;
    for (; rest >= 255; rest -= 255) block.push_back(static_cast<char>(255));
    block.push_back(static_cast<char>(rest));
  }
  block += stream;
  uint32_t len = static_cast<uint32_t>(block.size());
  std::string out(1, '\1');
  out.append(reinterpret_cast<const char*>(&len), 4);
  return out + block;
}

std::vector<HeapSnapshot> read(const std::string& file) {
  MemReader in(file.data(), file.size());
  return read_bytehound_dat(in, "app.dat");
}

double held(const HeapSnapshot& s, uint64_t pc) {
  double b = 0;
  for (const auto& st : s.stacks)
    if (!st.stack().empty() && st.stack()[0] == pc) b += st.bytes;
  return b;
}

constexpr uint64_t kSec = 1000000;  // bytehound's timestamps are microseconds

}  // namespace

TEST_CASE("bytehound .dat: live blocks per call path at the end, the header's pid, the newest maps", "[profile]") {
  Events e;
  e.header();
  e.file(2 * kSec, "/proc/self/maps", "555500000000-555500002000 r-xp 00000000 fe:00 42 /app\n");
  // A maps snapshot queued earlier, written later: older, so not the one.
  e.file(1 * kSec, "/proc/self/maps", "666600000000-666600002000 r-xp 00000000 fe:00 42 /old\n");
  e.file(1 * kSec, "/app", "\x7f" "ELF and the rest of the binary, skipped");
  e.backtrace(1, {0x555500001000, 0x555500001100}).backtrace(2, {0x555500001200});
  e.alloc(1, 1, kSec + 10, 0xa000, 1000, 1).alloc(1, 2, kSec + 20, 0xb000, 300, 2).free(1, 2, kSec + 30, 0xb000);
  for (const std::string& file : {stored(e.s), stored(e.s, 7), lz4_literals(e.s)}) {
    auto snaps = read(file);
    REQUIRE(!snaps.empty());
    const HeapSnapshot& last = snaps.back();
    CHECK(last.backend == "bytehound");
    CHECK(last.pid == 42);
    CHECK(last.trigger.empty());
    CHECK(last.total_bytes == 1000);
    CHECK(held(last, 0x555500001000) == 1000);
    CHECK(held(last, 0x555500001200) == 0);
    REQUIRE(last.maps.size() == 1);
    CHECK(last.maps[0].path == "/app");
  }
}

TEST_CASE("bytehound .dat: frees match the allocation id, not the pointer; reallocations keep the id", "[profile]") {
  Events e;
  e.header();
  e.backtrace(1, {0x10}).backtrace(2, {0x20});
  // Two blocks at the same address in turn (the first freed, the address
  // reused); a second free of the first's id at that address is not the
  // second block's.
  e.alloc(1, 1, kSec, 0xa000, 100, 1).free(1, 1, kSec + 1, 0xa000).alloc(1, 2, kSec + 2, 0xa000, 200, 2);
  e.free(1, 1, kSec + 3, 0xa000);
  // A free of an id never seen (allocated before tracking): ignored.
  e.free(0, 0, kSec + 3, 0xdead);
  // A reallocation chain: 64 -> 4096 at another address, same id.
  e.alloc(2, 1, kSec + 4, 0xc000, 64, 1).realloc(2, 1, kSec + 5, 0xc000, 0xd000, 4096, 1);
  // A reallocation of a block never seen: dropped with its new block.
  e.realloc(3, 9, kSec + 6, 0xe000, 0xf000, 77777, 2);
  auto snaps = read(stored(e.s));
  CHECK(held(snaps.back(), 0x20) == 200);
  CHECK(held(snaps.back(), 0x10) == 4096);
  CHECK(snaps.back().total_objects == 2);
}

TEST_CASE("bytehound .dat: what each span held, whatever the order the events were written in", "[profile]") {
  Events late, early;
  for (Events* e : {&late, &early}) e->header(0).backtrace(1, {0x10});
  // Written in time order...
  early.alloc(1, 1, 1 * kSec, 0xa0, 1 << 20, 1).alloc(1, 2, 5 * kSec, 0xb0, 1 << 20, 1).free(1, 1, 9 * kSec, 0xa0);
  // ...and the way bytehound writes culled allocations: late, after the free.
  late.alloc(1, 2, 5 * kSec, 0xb0, 1 << 20, 1).alloc(1, 1, 1 * kSec, 0xa0, 1 << 20, 1).free(1, 1, 9 * kSec, 0xa0);
  auto a = read(stored(early.s)), b = read(stored(late.s));
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() == 10);  // one span a second, up to the last event's (9 s)
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].total_bytes == b[i].total_bytes);
  CHECK(a[0].total_bytes == 0);
  CHECK(a[1].total_bytes == (1 << 20));
  CHECK(a[5].total_bytes == (2 << 20));
  CHECK(a[9].total_bytes == (1 << 20));
  CHECK(a[9].time_ms == 9000);
}

TEST_CASE("bytehound .dat: a long run is kMaxDatSnapshots spans, their width doubled", "[profile]") {
  Events e;
  e.header(0).backtrace(1, {0x10});
  for (uint64_t i = 0; i < 1000; ++i) e.alloc(1, i + 1, i * kSec, 0x1000 + i * 16, 1024, 1);
  auto snaps = read(stored(e.s));
  CHECK(snaps.size() <= kMaxDatSnapshots);
  CHECK(snaps.size() >= kMaxDatSnapshots / 2);
  CHECK(snaps.back().total_bytes == 1000 * 1024);
  for (size_t i = 1; i < snaps.size(); ++i) CHECK(snaps[i].total_bytes >= snaps[i - 1].total_bytes);
}

TEST_CASE("bytehound .dat: the map events' varints are skipped field by field", "[profile]") {
  Events e;
  e.header().backtrace(1, {0x10});
  // AddRegion with a name, UpdateRegionUsage, RemoveRegion with two sources,
  // MemoryMapEx: varints of one, two and nine bytes.
  e.u32(24).u64(1).varint(5).u64(0x7000).varint(0x41000).varint(0).varint(123456789).u32(0).u32(0).u32(3);
  e.varint(15);
  e.s += "[anon:jemalloc]";
  e.u32(26).u64(1).varint(5).u64(0x7000).varint(0x41000);
  for (int i = 0; i < 6; ++i) e.varint(1504);
  e.u32(25).u64(1).varint(5).u64(0x7000).varint(0x41000).varint(2);
  for (int i = 0; i < 2; ++i) e.u64(0x7000).varint(0x41000).u64(2).varint(15).u32(7);
  e.u32(27).varint(5).u64(0x7000).varint(0).varint(0x41000).u32(3).u32(0x22).u32(UINT32_MAX).varint(0);
  e.u64(3).varint(1).u32(7);
  e.alloc(1, 1, kSec, 0xa0, 555, 1);
  CHECK(read(stored(e.s)).back().total_bytes == 555);
}

TEST_CASE("bytehound .dat: a partial backtrace reuses the thread's previous frames", "[profile]") {
  Events e;
  e.header();
  e.u32(13).u64(1).u32(7).u32(UINT32_MAX).u32(3).u64(0x1).u64(0x2).u64(0x3);  // all new
  e.u32(13).u64(2).u32(7).u32(1).u32(1).u64(0x9);  // replaces the innermost frame: 9 2 3
  e.alloc(1, 1, kSec, 0xa0, 10, 2);
  auto snaps = read(stored(e.s));
  REQUIRE(snaps.back().stacks.size() == 1);
  CHECK(snaps.back().stacks[0].stack() == std::vector<uint64_t>{0x9, 0x2, 0x3});
}

TEST_CASE("bytehound .dat cut short: read as far as it goes, the last snapshot says so", "[profile]") {
  Events e;
  e.header().backtrace(1, {0x10}).alloc(1, 1, kSec, 0xa0, 10, 1).alloc(1, 2, kSec, 0xb0, 20, 1);
  // Small chunks: a cut drops the chunk it falls in (an LZ4 block cut
  // short cannot be decoded), and what came before is read.
  std::string file = stored(e.s, 16);
  auto whole = read(file);
  CHECK(whole.back().trigger.empty());
  auto cut = read(file.substr(0, file.size() - 5));  // inside the last event
  CHECK(cut.back().trigger == "cut");
  CHECK(cut.back().total_bytes == 10);
  std::string more = file + std::string("\2\xff\xff", 3);  // a chunk header cut short
  CHECK(read(more).back().trigger == "cut");
}

TEST_CASE("bytehound .dat refused in one line: not one, damaged, post-processed, unknown events", "[profile]") {
  auto refused = [](const std::string& file, const std::string& what) {
    try {
      read(file);
      FAIL("read: " + what);
    } catch (const FileError& err) {
      CHECK_THAT(err.what(), Catch::StartsWith("app.dat: ") && Catch::Contains(what));
    }
  };
  refused("", "empty");
  refused("MEMORY_PROFILER\n", "a chunk of kind 77");
  Events e;
  e.header();
  refused(stored(e.s).substr(0, 20), "truncated: it ends before bytehound's header");
  refused(stored(Events().u32(20).s), "does not start with bytehound's header");
  refused(std::string("\1\xff\xff\xff\x7f", 5), "a chunk of 2147483647 bytes");
  // A match reaching before the block: an LZ4 block that does not decode.
  refused(std::string("\1\x03\0\0\0\x0f\x05\0", 8), "an LZ4 chunk that does not decode");
  Events unknown = e;
  unknown.u32(99);
  refused(stored(unknown.s), "an event of unknown kind 99");
  Events post = e;
  post.u32(16).u32(0);
  refused(stored(post.s), "a post-processed file");
}

TEST_CASE("bytehound .dat: empty chunks and oversized lengths inside events cost the file's size, no more",
          "[profile]") {
  Events e;
  e.header();
  std::string file = stored(e.s);
  for (int i = 0; i < 200000; ++i) file += std::string("\2\0\0\0\0", 5);  // a deep recursion once
  // A file event claiming 2^63 bytes, a backtrace claiming 2^32 - 1 frames:
  // each ends where the file does.
  Events huge = e;
  huge.u32(23).u64(1).str("/x").u64(1ull << 63);
  CHECK(read(file + stored(huge.s.substr(e.s.size()))).back().trigger == "cut");
  Events deep = e;
  deep.u32(5).u64(1).u32(UINT32_MAX).u64(1).u64(2);
  CHECK(read(stored(deep.s)).back().trigger == "cut");
}

TEST_CASE("LZ4 blocks as bytehound writes them: overlapping matches, no end-of-block rules, bounds", "[profile]") {
  // "ab" then a match of 8 at offset 2 (overlapping): "ababababab", ending
  // on the match (LZ4's spec wants literals last; bytehound's encoder does not).
  const unsigned char block[] = {0x24, 'a', 'b', 0x02, 0x00};
  std::string out;
  REQUIRE(lz4_block_decode(block, sizeof block, out, 1 << 20));
  CHECK(out == "ababababab");
  out.clear();
  CHECK_FALSE(lz4_block_decode(block, sizeof block, out, 9));  // past the limit
  const unsigned char zero_offset[] = {0x10, 'a', 0x00, 0x00};
  out.clear();
  CHECK_FALSE(lz4_block_decode(zero_offset, sizeof zero_offset, out, 1 << 20));
  const unsigned char short_literals[] = {0x50, 'a'};
  out.clear();
  CHECK_FALSE(lz4_block_decode(short_literals, sizeof short_literals, out, 1 << 20));
}

TEST_CASE("bytehound .dat: older and 32-bit events (Alloc, Free, File, Backtrace32), squeeze's GroupStatistics",
          "[profile]") {
  Events e;
  e.header();
  e.u32(4).u64(kSec).str("/proc/self/maps").str("10000-20000 r-xp 00000000 fe:00 7 /app32\n");  // File
  e.u32(19).u64(1).u32(2).u32(0x10100).u32(0x10200);                                          // Backtrace32
  e.u32(17);  // GroupStatistics: culled allocations, never live
  for (int i = 0; i < 7; ++i) e.u64(1000 + i);
  e.u32(1).u64(kSec + 1).body(0xa0, 64, 1);                 // Alloc: no id, matched by pointer
  e.u32(1).u64(kSec + 2).body(0xb0, 32, 1);
  e.u32(3).u64(kSec + 3).u64(0xb0).u64(0).u32(7);           // Free of 0xb0
  auto snaps = read(stored(e.s));
  CHECK(snaps.back().total_bytes == 64);
  REQUIRE(snaps.back().stacks.size() == 1);
  CHECK(snaps.back().stacks[0].stack() == std::vector<uint64_t>{0x10100, 0x10200});
  REQUIRE(snaps.back().maps.size() == 1);
  CHECK(snaps.back().maps[0].path == "/app32");
}
