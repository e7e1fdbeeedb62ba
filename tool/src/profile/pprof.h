// A snapshot as pprof's profile.proto, gzipped (report --pprof): what `go
// tool pprof`, Pyroscope and Parca read. Sample types inuse_objects/count
// and inuse_space/bytes; every location symbolised here (functions, files,
// lines, inline frames), every mapping with its file's build-id; the
// allocator's frames at the leaf dropped, as report's sites drop them, so
// pprof's flat view ranks the code that asked for the memory.
#pragma once

#include <string>

#include "profile/heap_profile.h"
#include "profile/symbolizer.h"

namespace memprofile {

// Writes `snap` to `path` (created or replaced). Throws FileError naming
// `path` when it cannot be written.
void write_pprof(const HeapSnapshot& snap, Symbolizer& symbolizer, const std::string& path);

}  // namespace memprofile
