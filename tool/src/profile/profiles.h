// The profiles a report's arguments name, read: jemalloc dumps, heaptrack
// traces, the process and memory records beside them, also from inside
// collect archives (checked against their manifests in the same pass),
// grouped by process, each oldest first, its exit snapshot left out.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "profile/memory_record.h"
#include "profile/processes.h"

namespace memprofile {

struct LoadedProfiles {
  std::vector<ProcessSeries> processes;
  std::map<uint64_t, std::vector<std::string>> notes;  // by pid; 0: the files' own (a dump cut short)
  std::map<std::string, MemoryRecord> memory;           // NAME.mem.json, by its dump's path
  std::map<uint64_t, ProcessInfo> records;              // memprofile-proc.PID.json, by process key (ProcessInfo::key)
};

// `args`: files, directories of them, collect archives. `base`: an earlier
// jemalloc dump put before its process's first (--base), or "". With no heap
// profile among them but memory records (memprofile exec --backend none),
// `processes` is empty and `memory` holds them.
LoadedProfiles load_profiles(const std::vector<std::string>& args, const std::string& base);

// A file its caller opened and checked itself (serve opens its members'
// files so: base/checked_open.h), read from the descriptor and never again
// by name, `size` bytes at most (a trace still written is read as it stood
// then). `pid` is the process its name says; `backend` the profiler that
// process runs under ("": any).
struct OpenedProfile {
  std::string path;  // for messages and its kind (by its base name)
  int fd = -1;
  uint64_t size = 0;
  uint64_t pid = 0;
  std::string backend;
};

// Reads them as load_profiles reads files. A profile counts for its pid
// only when what it holds agrees with its name: one that does not parse,
// says another pid, or holds another profiler's profile is left out, with
// a line in `left_out`, and never attributed to anyone.
LoadedProfiles load_opened_profiles(const std::vector<OpenedProfile>& files, std::vector<std::string>& left_out);

// Whether a file name in an output directory is one load_profiles reads: a
// dump, a trace, a capture or its marks, a memory or process record (not a
// profiler's log).
bool is_loadable_name(const std::string& name);

// The last path component.
std::string basename_of(const std::string& path);

}  // namespace memprofile
