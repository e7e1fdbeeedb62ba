// heaptrack's raw trace, read without heaptrack_interpret: what the preload
// library writes (DUMP_HEAPTRACK_OUTPUT), plain or gzip/zstd-compressed.
// Every allocation is recorded (no sampling); the reader keeps the live
// blocks and the bytes each call path holds, and takes snapshots over time
// ('c' lines, every 10 ms), thinned to at most kMaxSnapshots by doubling
// their spacing, so a trace of any length costs its live blocks and call
// paths, never its length. Format (file format 3, heaptrack 1.3 to 1.6):
// lines "TYPE HEX...", see docs/report.md.
#pragma once

#include <string>
#include <vector>

#include "base/stream.h"
#include "profile/heap_profile.h"

namespace memprofile {

constexpr size_t kMaxHeaptrackSnapshots = 24;
constexpr size_t kMaxTraceLine = 1 << 20;  // an 'm' line lists every segment of a module
constexpr uint64_t kMaxBlockSize = 1ull << 48;  // bytes of one allocation: an address space's
constexpr size_t kMaxTraceFrames = 8u << 20;    // frames of all allocating call paths (64 MiB of addresses)

// True when `head` starts a heaptrack raw trace ("v HEX 3").
bool is_heaptrack_trace(const std::string& head);

// Reads the trace at `path` (decompressed as needed) into snapshots, oldest
// first; the last is the state at the trace's end. Throws FileError naming
// the file and the line for anything malformed, and for a trace that is an
// interpreted one (heaptrack_interpret's output) or of an older format.
std::vector<HeapSnapshot> read_heaptrack_trace(const std::string& path);
// The same from a stream (an entry of a collect archive), `name` in messages.
std::vector<HeapSnapshot> read_heaptrack_trace(Reader& in, const std::string& name);

}  // namespace memprofile
