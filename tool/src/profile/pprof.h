// A snapshot as pprof's profile.proto, gzipped (report --pprof): what `go
// tool pprof`, Pyroscope and Parca read. Sample types inuse_objects/count
// and inuse_space/bytes; every location symbolised here (functions, files,
// lines, inline frames), every mapping with its file's build-id; the
// allocator's frames at the leaf dropped, as report's sites drop them, so
// pprof's flat view ranks the code that asked for the memory.
#pragma once

#include <string>
#include <vector>

#include "profile/heap_profile.h"
#include "profile/symbolizer.h"

namespace memprofile {

// Writes `snap` to `path` (created or replaced). Throws FileError naming
// `path` when it cannot be written.
void write_pprof(const HeapSnapshot& snap, Symbolizer& symbolizer, const std::string& path);

// Several processes' snapshots in one profile, each sample labelled with its
// process ("pid", a number label: `go tool pprof -tagfocus pid=812`, or
// -tags to see them side by side). One snapshot alone gets no label.
struct LabeledSnapshot {
  const HeapSnapshot* snap;
  uint64_t pid;
  std::string program;  // with PprofOptions::labels
};
void write_pprof(const std::vector<LabeledSnapshot>& snaps, Symbolizer& symbolizer, const std::string& path);

// The encoding apart from where the bytes go (a file, an HTTP response).
struct PprofOptions {
  // Every sample labelled with its process, however many there are: pid
  // (a number), program and backend (strings), as serve's scrapers group them.
  bool labels = false;
  std::vector<std::string> comments;  // more of the profile's comments (what it leaves out, and why)
  int64_t time_nanos = 0, duration_nanos = 0;  // when it was taken, and the span of a growth (0: not said)
};
// The gzipped profile.proto. Throws Error when there is nothing to encode.
std::string encode_pprof(const std::vector<LabeledSnapshot>& snaps, Symbolizer& symbolizer, const PprofOptions& options);

}  // namespace memprofile
