// bytehound's profile (.dat), read without bytehound: what its preload
// library writes (MEMORY_PROFILER_OUTPUT), a stream of chunks (an LZ4 block
// or stored bytes each) that together hold speedy-encoded events: a header,
// backtraces, every allocation, reallocation and free (by allocation id),
// /proc/self/maps snapshots and the mapped binaries. The reader keeps the
// live blocks and, per call path, what was allocated and freed in each of
// kMaxDatSnapshots spans of the run (their width doubles as the run goes
// on), so the bytes held at the end of each span do not depend on the order
// events were written in (bytehound writes culled allocations late). A file
// of any length costs its live blocks and call paths. See docs/report.md.
#pragma once

#include <string>
#include <vector>

#include "base/stream.h"
#include "profile/heap_profile.h"
#include "profile/span_ledger.h"

namespace memprofile {

constexpr size_t kMaxDatSnapshots = SpanLedger::kMaxSpans;
// One chunk: the preload library writes at most 512 KiB decoded; bytehound's
// own tools (squeeze) write larger ones.
constexpr uint32_t kMaxDatChunk = 16u << 20;
// What one profile may make the reader hold: live allocations at once,
// backtrace ids, distinct call paths (each keeps a change per span), and
// threads with a partial backtrace; past any, the file is refused in one
// line (a real run reaches none of them; a crafted file could).
constexpr size_t kMaxDatLiveBlocks = 4u << 20;
constexpr size_t kMaxDatBacktraces = 2u << 20;
constexpr size_t kMaxDatSites = 128u << 10;
constexpr size_t kMaxDatThreads = 64u << 10;
constexpr size_t kMaxDatMaps = 4u << 20;       // bytes of one /proc/self/maps snapshot

// True when the file name is one bytehound writes (memory-profiling_*.dat
// by default, *.dat as MEMORY_PROFILER_OUTPUT names it).
bool is_bytehound_name(const std::string& name);

// Reads the profile from `in` into snapshots, oldest first; the last is the
// state where the file ends (trigger "cut" when it ends inside a chunk or
// an event: the process was still writing it, or was killed). Throws
// FileError naming `name` and the byte offset for anything malformed.
std::vector<HeapSnapshot> read_bytehound_dat(Reader& in, const std::string& name);

// The LZ4 block in [src, src + n) appended to `out`, at most `limit` bytes
// in all (bytehound's encoder does not keep LZ4's end-of-block rules, so a
// strict decoder refuses its blocks; this one checks only bounds). False
// when the block is malformed or would exceed the limit.
bool lz4_block_decode(const unsigned char* src, size_t n, std::string& out, size_t limit);

}  // namespace memprofile
