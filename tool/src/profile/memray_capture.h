// memray's capture (.bin), read without memray: what memray.Tracker and
// `memray run` write, format version 11 (memray 1.11 to 1.18), LZ4-framed
// when the process ended cleanly, raw with zero padding when it did not. A
// header, then records in one byte stream: Python frames by id, pushes and
// pops of each thread's Python stack, native call paths as a tree, the
// loaded modules' segments, every allocation and free (by address), and
// the process's RSS every few milliseconds, which is the only clock. The
// reader keeps the live blocks and, per call path, what was allocated and
// freed in each span of the run (SpanLedger). The layout is memray's own
// source (its records.h, record_writer.cpp, record_reader.cpp); see
// docs/report.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/stream.h"
#include "profile/heap_profile.h"

namespace memprofile {

// The one format version read, and the memray releases that write it.
constexpr int32_t kMemrayVersion = 11;
// What one capture may make the reader hold: live blocks, Python frame ids,
// Python and native call-path nodes, threads, distinct call paths, the
// bytes of one string; past any, the file is refused in one line.
constexpr size_t kMaxMemrayLiveBlocks = 4u << 20;
constexpr size_t kMaxMemrayFrames = 1u << 20;
constexpr size_t kMaxMemrayNodes = 4u << 20;
constexpr size_t kMaxMemrayThreads = 64u << 10;
constexpr size_t kMaxMemraySites = 128u << 10;
constexpr size_t kMaxMemrayString = 64u << 10;
// Most bytes one compressed capture may decompress to (a day of a busy
// service is a few GiB of records; the reader streams them).
constexpr uint64_t kMaxMemrayDecoded = 64ull << 30;

// A moment memprofile's bootstrap marked in a capture: a `memprofile
// snapshot` ('m') or a --snapshot-every tick ('i'), in ms since the epoch.
// The bootstrap appends them to the capture's marks file (memray-marks.*,
// runtime/backend.h), one line each: "EPOCH_MS KIND".
struct MemrayMark {
  uint64_t epoch_ms = 0;
  char kind = 'm';
};
// Most bytes of one marks file read (a mark every second for a week is 2
// MiB; the bootstrap stops marking well before).
constexpr size_t kMaxMemrayMarksFile = 4u << 20;

// The marks in a marks file's text, oldest first. Throws FileError naming
// `name` and the line for one that is not a mark; a last line without its
// newline (the process died while it wrote it) is left out.
std::vector<MemrayMark> parse_memray_marks(const std::string& text, const std::string& name);

// True when the file name is one memray writes: NAME.bin, and a forked
// child's NAME.bin.PID (follow_fork).
bool is_memray_name(const std::string& name);

// Reads the capture from `in` into snapshots, oldest first; the last is the
// state where the records end (trigger "cut" when they end without memray's
// trailer: the process was killed, or the file copied while it ran). With
// marks, the snapshots before it are the states at the marks (trigger 'm'
// or 'i'; thinned evenly to SpanLedger's bound, the last kept); without,
// at the ends of spans that double as the run goes on. Throws
// FileError naming `name` and the byte offset for anything malformed, for
// another format version, and for an aggregated capture.
std::vector<HeapSnapshot> read_memray_capture(Reader& in, const std::string& name,
                                              const std::vector<MemrayMark>& marks = {});

}  // namespace memprofile
