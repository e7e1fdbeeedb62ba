// memray's capture read into the profile model: the header, the shared
// delta-encoded fields, each thread's Python stack from pushes and pops, the
// native call-path tree, frees matched by address, mmap ranges cut by
// munmap, the RSS records as the clock, the trailer and the zero padding of
// a killed process; real memray 1.17 captures (tests/fixtures/memray); and
// other versions, aggregated and damaged files refused in one line.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/stream.h"
#include "profile/memray_capture.h"
#include "support.h"

using namespace memprofile;

namespace {

// The writer's side, as memray's RecordWriter encodes (records.h, record_writer.h).
struct Capture {
  std::string s;
  uint64_t frame = 0, line = 0, ip = 0, native = 0, address = 0;
  Capture& u8(uint8_t v) { return s.push_back(static_cast<char>(v)), *this; }
  template <class T>
  Capture& raw(T v) { return s.append(reinterpret_cast<const char*>(&v), sizeof v), *this; }
  Capture& str(const std::string& v) { return s.append(v), s.push_back('\0'), *this; }
  Capture& varint(uint64_t v) {
    while (v >= 0x80) u8(static_cast<uint8_t>(v | 0x80)), v >>= 7;
    return u8(static_cast<uint8_t>(v));
  }
  Capture& sdelta(uint64_t& prev, uint64_t v) {
    int64_t d = static_cast<int64_t>(v - prev);
    prev = v;
    return varint((static_cast<uint64_t>(d) << 1) ^ static_cast<uint64_t>(d >> 63));
  }
  // Started at 1000 ms since the epoch; `end`: when it was closed (the
  // start time when it never was).
  Capture& header(int32_t version = 11, bool native_traces = false, uint8_t format = 0, uint64_t skipped = 0,
                  int64_t end = 2000) {
    s.append("memray", 7);
    raw(version).u8(native_traces).u8(format).raw<uint64_t>(0).raw<uint64_t>(0).raw<int64_t>(1000).raw<int64_t>(end);
    return str("python3 app.py").raw<int32_t>(4242).raw<uint64_t>(1).raw<uint64_t>(skipped).u8(1).u8(0);
  }
  Capture& frame_index(uint64_t id, const std::string& fn, const std::string& file, uint64_t lineno, bool entry = true) {
    u8(entry ? 0x03 : 0x13);
    return sdelta(frame, id).str(fn).str(file).sdelta(line, lineno);
  }
  Capture& push(uint64_t id) { return u8(0x04).sdelta(frame, id); }
  Capture& pop(unsigned n) { return u8(static_cast<uint8_t>(0x09 | (n - 1) << 4)); }
  Capture& thread(uint64_t tid) { return u8(0x0c).raw(tid); }
  Capture& memory(uint64_t rss, uint64_t ms) { return u8(0x0b).varint(rss).varint(ms); }
  Capture& alloc(uint64_t addr, uint64_t size, unsigned allocator = 1) {
    u8(static_cast<uint8_t>(0x01 | allocator << 4)).sdelta(address, addr);
    return allocator == 2 || allocator == 15 ? *this : varint(size);
  }
  Capture& free(uint64_t addr) { return alloc(addr, 0, 2); }
  Capture& native_alloc(uint64_t addr, uint64_t size, uint64_t node) {
    return u8(0x12).sdelta(address, addr).varint(size).sdelta(native, node);
  }
  Capture& native_index(uint64_t at, uint64_t parent) { return u8(0x05).sdelta(ip, at).sdelta(native, parent); }
  Capture& segments(const std::string& file, uint64_t base, uint64_t vaddr, uint64_t memsz) {
    u8(0x06).u8(0x07).str(file).varint(1).raw(base);
    return u8(0x08).raw(vaddr).varint(memsz);
  }
  Capture& trailer() { return u8(0x10); }
};

std::vector<HeapSnapshot> read(const std::string& bytes, const std::vector<MemrayMark>& marks = {}) {
  MemReader in(bytes.data(), bytes.size());
  return read_memray_capture(in, "cap.bin", marks);
}

// The Python frames of a stack, innermost first, as function:line.
std::vector<std::string> python_frames(const HeapSnapshot& s, const StackSample& sample) {
  std::vector<std::string> out;
  for (uint64_t pc : sample.stack())
    if (pc & kResolvedFrame) {
      const ResolvedFrame& f = (*s.resolved)[pc & kResolvedIndexMask];
      out.push_back(f.function + ":" + std::to_string(f.line) + ((pc & kHiddenFrame) ? " (hidden)" : ""));
    }
  return out;
}

const StackSample* heaviest(const HeapSnapshot& s) {
  const StackSample* best = nullptr;
  for (const auto& st : s.stacks)
    if (!best || st.bytes > best->bytes) best = &st;
  return best;
}

std::string error_of(const std::string& bytes) {
  try {
    read(bytes);
  } catch (const FileError& e) {
    return e.what();
  }
  return "";
}

std::string real_capture(const std::string& name) {
  std::ifstream f(testing::source_dir() + "/tests/fixtures/memray/" + name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("memray capture: names memray writes, and a forked child's", "[profile]") {
  CHECK(is_memray_name("memray-app.py.1234.bin"));
  CHECK(is_memray_name("out.bin"));
  CHECK(is_memray_name("out.bin.5678"));
  CHECK_FALSE(is_memray_name(".bin"));
  CHECK_FALSE(is_memray_name("out.binx"));
  CHECK_FALSE(is_memray_name("out.bin.12a"));
  CHECK_FALSE(is_memray_name("trace.dat"));
}

TEST_CASE("memray capture: Python stacks, frees by address, the clock from RSS records", "[profile]") {
  Capture c;
  c.header().memory(1 << 20, 0);
  c.frame_index(0, "<module>", "app.py", 10).thread(1).push(0);
  c.frame_index(1, "leaky", "app.py", 4).push(1);
  c.alloc(0x1000, 100).alloc(0x2000, 50);
  c.pop(1).frame_index(2, "temp", "app.py", 7).push(2).alloc(0x3000, 1000).free(0x3000);
  c.memory(1 << 20, 1500).pop(1).push(1).alloc(0x4000, 100).free(0x2000).trailer();
  auto snaps = read(c.s);
  REQUIRE(snaps.size() == 2);  // 0-1 s, then 1-2 s
  CHECK(snaps.back().backend == "memray");
  CHECK(snaps.back().pid == 4242);
  CHECK(snaps.back().trigger.empty());
  CHECK(snaps.front().total_bytes == 150);
  CHECK(snaps.back().total_bytes == 200);
  const StackSample* top = heaviest(snaps.back());
  REQUIRE(top);
  CHECK(python_frames(snaps.back(), *top) == std::vector<std::string>{"leaky:4", "<module>:10"});
  CHECK(top->objects == 2);
}

TEST_CASE("memray capture: each thread has its own stack; frames above tracking are marked hidden", "[profile]") {
  Capture c;
  c.header(11, false, 0, 1);  // one frame above the Tracker on the main thread
  c.frame_index(0, "run", "memray/run.py", 1).frame_index(1, "main", "app.py", 2).frame_index(2, "worker", "app.py", 3);
  c.thread(1).push(0).push(1).alloc(0x10, 10);
  c.thread(2).push(2).alloc(0x20, 20);
  c.thread(1).alloc(0x30, 30).trailer();
  auto s = read(c.s).back();
  std::vector<std::vector<std::string>> stacks;
  for (const auto& st : s.stacks) stacks.push_back(python_frames(s, st));
  CHECK(stacks.size() == 2);
  CHECK(std::count(stacks.begin(), stacks.end(), std::vector<std::string>{"main:2", "run:1 (hidden)"}) == 1);
  CHECK(std::count(stacks.begin(), stacks.end(), std::vector<std::string>{"worker:3"}) == 1);
}

TEST_CASE("memray capture: native call paths under the Python stack, the newest memory map", "[profile]") {
  Capture c;
  c.header(11, true);
  c.segments("/usr/bin/python3.13", 0x400000, 0x1000, 0x10000);
  c.frame_index(0, "leaky", "app.py", 4).thread(1).push(0);
  c.native_index(0x401500, 0).native_index(0x402000, 1);  // node 2 under node 1
  c.native_alloc(0x9000, 4096, 2).trailer();
  auto s = read(c.s).back();
  REQUIRE(s.stacks.size() == 1);
  const auto& pcs = s.stacks[0].stack();
  REQUIRE(pcs.size() == 3);
  CHECK(pcs[0] == 0x402000);  // innermost first
  CHECK(pcs[1] == 0x401500);
  CHECK((pcs[2] & kResolvedFrame));
  REQUIRE(s.maps.size() == 1);
  CHECK(s.maps[0].start == 0x401000);
  CHECK(s.maps[0].end == 0x411000);
  CHECK(s.maps[0].offset_is_vaddr);
}

TEST_CASE("memray capture: munmap takes what it covers of a mapping, in the middle too", "[profile]") {
  Capture c;
  c.header().frame_index(0, "f", "a.py", 1).thread(1).push(0);
  c.alloc(0x100000, 0x10000, 10);           // mmap 64 KiB
  c.alloc(0x104000, 0x4000, 11);            // munmap 16 KiB inside it
  c.alloc(0x10c000, 0x8000, 11).trailer();  // and its last 16 KiB, and past it
  auto s = read(c.s).back();
  CHECK(s.total_bytes == 0x10000 - 0x4000 - 0x4000);
}

TEST_CASE("memray capture: a killed process's file ends in zeros; a cut one mid-record; both read, marked cut",
          "[profile]") {
  Capture c;
  c.header().frame_index(0, "leaky", "app.py", 4).thread(1).push(0).alloc(0x10, 64).alloc(0x20, 64);
  auto padded = read(c.s + std::string(4096, '\0'));
  CHECK(padded.back().trigger == "cut");
  CHECK(padded.back().total_bytes == 128);
  std::string cut = c.s;
  cut.pop_back();  // inside the last allocation's size
  auto snaps = read(cut);
  CHECK(snaps.back().trigger == "cut");
  CHECK(snaps.back().total_bytes == 64);
}

TEST_CASE("memray capture: other versions, aggregated, damaged and foreign files refused in one line", "[profile]") {
  Capture v12;
  v12.header(12);
  CHECK_THAT(error_of(v12.s), Catch::Contains("memray capture format version 12; memprofile reads version 11"));
  Capture agg;
  agg.header(11, false, 1);
  CHECK_THAT(error_of(agg.s), Catch::Contains("an aggregated capture"));
  CHECK_THAT(error_of("heap_v2/524288\n"), Catch::Contains("not a memray capture"));
  CHECK_THAT(error_of(std::string("memray", 7) + "\x0b"), Catch::Contains("truncated: it ends inside memray's header"));
  Capture damaged;
  damaged.header().thread(1).alloc(0x10, 1);
  damaged.u8(0).u8(0).u8(0x01);
  CHECK_THAT(error_of(damaged.s), Catch::Contains("a zero byte where a record starts, and records after it"));
  Capture bad_type;
  bad_type.header().u8(0x0d);
  CHECK_THAT(error_of(bad_type.s), Catch::Contains("a record of type 13"));
  Capture undefined;
  undefined.header(11, true).thread(1).native_alloc(0x10, 8, 5);
  CHECK_THAT(error_of(undefined.s), Catch::Contains("native call-path node 5, which is not defined"));
  Capture lz4;
  lz4.s = std::string("\x04\x22\x4d\x18", 4) + std::string(32, '\x7f');
  CHECK_THAT(error_of(lz4.s), Catch::Contains("its LZ4 frame does not decode"));
}

TEST_CASE("memray capture: real memray 1.17 captures (compressed, raw, native, killed) name leaky at app line 5",
          "[profile]") {
  for (const char* name : {"plain.bin", "raw.bin", "native.bin", "killed.bin"}) {
    INFO(name);
    auto snaps = read(real_capture(name));
    REQUIRE(!snaps.empty());
    const HeapSnapshot& last = snaps.back();
    CHECK(last.trigger == (std::string(name) == "killed.bin" ? "cut" : ""));
    const StackSample* top = heaviest(last);
    REQUIRE(top);
    auto frames = python_frames(last, *top);
    REQUIRE(!frames.empty());
    CHECK(frames[0] == "leaky:5");
    CHECK(top->bytes >= 64 * 1024 * 100);
  }
}

// Header's start time: 1000 ms since the epoch; marks are in epoch ms.
TEST_CASE("memray capture: marks end the spans, each snapshot the state at its mark, the last at the end", "[profile]") {
  Capture c;
  c.header(11, false, 0, 0, 1000).memory(1 << 20, 0).frame_index(0, "main", "app.py", 1).thread(1).push(0);
  c.alloc(0x1000, 100).memory(1 << 20, 500).alloc(0x2000, 50);
  c.memory(1 << 20, 1500).alloc(0x3000, 25).free(0x1000).memory(1 << 20, 2500).trailer();
  // One before the capture began and one past its records: neither ends a span.
  auto snaps = read(c.s, {{500, 'm'}, {1000 + 600, 'm'}, {1000 + 2000, 'i'}, {1000 + 9000, 'm'}});
  REQUIRE(snaps.size() == 3);
  CHECK(snaps[0].time_ms == 600);
  CHECK(snaps[0].trigger == "m");
  CHECK(snaps[0].total_bytes == 150);
  CHECK(snaps[1].time_ms == 2000);
  CHECK(snaps[1].trigger == "i");
  CHECK(snaps[1].total_bytes == 75);
  CHECK(snaps[2].time_ms == 2500);  // nothing allocated after 1.5 s: the RSS records still reach the end
  CHECK(snaps[2].trigger.empty());
  CHECK(snaps[2].total_bytes == 75);
  // Without them, the spans double from a second.
  auto plain = read(c.s);
  REQUIRE(plain.size() == 2);
  CHECK(plain[0].time_ms == 1000);
  CHECK(plain[0].trigger.empty());
}

TEST_CASE("memray capture: many marks are thinned evenly to 23, the last kept", "[profile]") {
  Capture c;
  c.header(11, false, 0, 0, 1000).memory(1 << 20, 0).frame_index(0, "main", "app.py", 1).thread(1).push(0);
  std::vector<MemrayMark> marks;
  for (uint64_t t = 1; t <= 100; ++t) {
    c.memory(1 << 20, t * 10).alloc(0x1000 + t * 64, 10);
    marks.push_back({1000 + t * 10, 'i'});
  }
  c.memory(1 << 20, 2000).trailer();
  auto snaps = read(c.s, marks);
  REQUIRE(snaps.size() == 24);
  CHECK(snaps[22].time_ms == 1000);  // the last mark
  CHECK(snaps[22].total_bytes == 1000);
  CHECK(snaps[23].time_ms == 2000);
  for (size_t i = 1; i < 23; ++i) CHECK(snaps[i].time_ms > snaps[i - 1].time_ms);
}

TEST_CASE("memray marks: one \"EPOCH_MS KIND\" a line; a damaged line refused in one line", "[profile]") {
  auto marks = parse_memray_marks("1796403545431 i\n1796403546434 m\n17964", "memray-marks.1.bin");
  REQUIRE(marks.size() == 2);  // the last line, without its newline, was still being written
  CHECK(marks[0].epoch_ms == 1796403545431u);
  CHECK(marks[0].kind == 'i');
  CHECK(marks[1].kind == 'm');
  CHECK(parse_memray_marks("", "m").empty());
  auto error = [](const std::string& text) {
    try {
      parse_memray_marks(text, "memray-marks.1.bin");
    } catch (const FileError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(error("1 i\n2 x\n"), Catch::Contains("memray-marks.1.bin: line 2: not a mark"));
  CHECK_THAT(error(" i\n"), Catch::Contains("line 1: not a mark"));
  CHECK_THAT(error("12345678901234567 i\n"), Catch::Contains("line 1: not a mark"));  // 17 digits: not a time
  CHECK_THAT(error("1 i \n"), Catch::Contains("line 1: not a mark"));
  CHECK_THAT(error(std::string(kMaxMemrayMarksFile + 1, '1')), Catch::Contains("larger than 4 MiB"));
}

TEST_CASE("memray capture: asked-for marks are kept before scheduled ones; a closed capture's end bounds them", "[profile]") {
  Capture c;
  c.header(11, false, 0, 0, 1000 + 3000).memory(1 << 20, 0).frame_index(0, "main", "app.py", 1).thread(1).push(0);
  std::vector<MemrayMark> marks;
  for (uint64_t t = 1; t <= 100; ++t) {
    c.memory(1 << 20, t * 10).alloc(0x1000 + t * 64, 10);
    marks.push_back({1000 + t * 10, 'i'});
  }
  marks.push_back({1000 + 555, 'm'});  // between two scheduled ones
  marks.push_back({1000 + 500, 'm'});  // at the same moment as one: the asked-for one counts
  for (uint64_t t = 1; t <= 50; ++t) marks.push_back({1000 + 3000 + t * 10, 'i'});  // past the closed capture's end
  c.memory(1 << 20, 2000).trailer();
  auto snaps = read(c.s, marks);
  REQUIRE(snaps.size() == 24);
  size_t asked = 0;
  for (const auto& s : snaps) asked += s.trigger == "m";
  CHECK(asked == 2);
  CHECK(snaps[22].time_ms == 1000);  // the last scheduled mark within the records, not those past the end
  CHECK(snaps[23].time_ms == 2000);
}

TEST_CASE("memray capture: a mark exactly where the records end is that snapshot's", "[profile]") {
  Capture c;
  c.header(11, false, 0, 0, 1000 + 3000).memory(1 << 20, 0).frame_index(0, "main", "app.py", 1).thread(1).push(0);
  c.alloc(0x1000, 10).memory(1 << 20, 500).alloc(0x2000, 10).memory(1 << 20, 900).trailer();
  auto snaps = read(c.s, {{1000 + 500, 'm'}, {1000 + 900, 'm'}});
  REQUIRE(snaps.size() == 2);
  CHECK(snaps[0].trigger == "m");
  CHECK(snaps[1].trigger == "m");
  CHECK(snaps[1].total_bytes == 20);
}
