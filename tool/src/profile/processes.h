// Heap profiles of a process tree (prefork workers, a backend per
// connection): the dumps grouped by process, each process named from the
// record the control library leaves beside its profiles
// (memprofile-proc.PID.json: its parent and program), and the views a
// report gives of them: the processes that grew, one process, or the
// processes of one program merged into one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "profile/heap_profile.h"
#include "profile/sites.h"

namespace memprofile {

struct ProcessInfo {
  uint64_t pid = 0, parent = 0;  // parent 0: unknown, or the tree's first process
  std::string program;           // "" when neither a record nor the dumps say
  int64_t started = 0;           // the record's start time (0: not said)
  std::string boot;              // the record's boot id, and its start in clock ticks after boot:
  uint64_t start_ticks = 0;      // with the pid, one process of one machine (two pods started in one second are two)
  std::string backend;           // the record's profiler
  bool recorded = true;          // false: a forked child its profiler does not record (its record says so)
  bool dormant = false;          // started dormant: what its first snapshot holds was allocated since memprofile start
  // What it held as it exited, when its record says (0: not said): the
  // kernel's anonymous resident memory, and its allocator's bytes in use.
  uint64_t exit_rss_anon = 0, exit_allocator_in_use = 0;
  // Which process of the report it is: its pid, unless two processes share
  // it (pid 1 of two pods' directories or archives, each with its own start
  // time), which then get keys of their own and `origin`, the input each
  // was read from, to tell them apart.
  uint64_t key = 0;
  std::string origin;
};

// Reads a memprofile-proc.PID.json record. Throws FileError naming `name`
// when it is not one.
ProcessInfo parse_process_record(const std::string& text, const std::string& name);

// One process's snapshots, oldest first.
struct ProcessSeries {
  ProcessInfo info;
  std::vector<HeapSnapshot> snaps;
  double first_bytes() const { return snaps.empty() ? 0 : snaps.front().total_bytes; }
  double last_bytes() const { return snaps.empty() ? 0 : snaps.back().total_bytes; }
  double growth() const { return snaps.size() < 2 ? 0 : last_bytes() - first_bytes(); }
};

// The dumps grouped by their process (HeapSnapshot::process, else the pid;
// each process's by its dump sequence), the records (by that key) filling in
// parent and program; a process with no record is named
// by its first mapping (the executable, in /proc/PID/maps order). Ordered
// by pid.
std::vector<ProcessSeries> group_by_process(std::vector<HeapSnapshot> dumps,
                                            const std::map<uint64_t, ProcessInfo>& records);

// What one part of a report is about: one process, or (merged) several of
// one program, each with its own snapshots.
struct ProcessView {
  std::string label;  // "pid 812 (/usr/sbin/nginx, forked from 811)", "/usr/sbin/nginx: 4 processes merged"
  std::vector<const ProcessSeries*> members;
  bool merged = false;
};

struct ViewChoice {
  std::vector<ProcessView> views;
  std::vector<std::string> notes;  // what was chosen and why, what was left out
};

// pid > 0: that process alone (FileError-free: an Error listing the pids
// when it is not there). merge: the processes of each program, one view
// each, ranked by their summed growth. Otherwise the processes that grew,
// ranked by growth (at most `most`), or, when none grew, the one with the
// most snapshots.
ViewChoice choose_views(const std::vector<ProcessSeries>& processes, uint64_t pid, bool merge, size_t most);

// Several processes' site tables as one: summed per site, aligned at each
// process's last snapshot (a process whose snapshots began later counts 0
// before its first).
SiteTable merge_site_tables(const std::vector<SiteTable>& tables);

// A table whose "sites" are the processes, bytes in use per snapshot aligned
// as merge_site_tables aligns them: the --trend of a tree, one line each.
SiteTable process_trend_table(const std::vector<ProcessSeries>& processes);

}  // namespace memprofile
