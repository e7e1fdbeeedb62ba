// The heap of a running tree as one pprof profile, for serve's
// /debug/pprof/heap: every member that serves asked for a snapshot at once
// (runtime/tree_control.h), the output directory read as report reads it
// (profile/profiles.h), each member's newest snapshot taken, symbolised from
// the process's own root (/proc/PID/root, build ids there), and encoded
// (profile/pprof.h) with a pid, program and backend label on every sample.
// Two of them, N seconds apart, give the growth (?seconds=N).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "profile/profiles.h"
#include "runtime/tree_control.h"

namespace memprofile {

// One member's newest snapshot.
struct MemberHeap {
  const HeapSnapshot* snap = nullptr;
  uint64_t pid = 0;
  unsigned long long start_ticks = 0;  // its start (/proc), so that a pid used again is another process
  std::string program;
};

// What one snapshot of the tree gave: the profiles read (they own the
// snapshots), the member chosen from each process, and one line for each
// member that gave none, and why.
struct TreeHeap {
  std::unique_ptr<LoadedProfiles> loaded;
  std::vector<std::unique_ptr<HeapSnapshot>> made;  // growth's snapshots
  std::shared_ptr<const TreeHeap> from;  // a growth's second snapshot, whose files `made` stands on
  std::vector<MemberHeap> members;
  std::vector<std::string> left_out;
  std::vector<std::string> notes;  // about members that are in it (a file as it stands)
  long root = 0;  // the first member that gave one: its root's files symbolise
  int64_t time_nanos = 0, duration_nanos = 0;  // when it was taken; a growth's span
};

// Snapshots the tree of `target` (its action is set here). Throws Error when
// no member of it serves.
TreeHeap snapshot_tree(const ControlRequest& target);

// The growth from `before` to `after`, member by member (by pid and start):
// each stack's bytes and objects in use now less before, where it grew. A
// member in one of them only is left out, with a line. Neither is changed
// (serve keeps the last snapshot for the next growth).
TreeHeap growth_between(const TreeHeap& before, const std::shared_ptr<const TreeHeap>& after);

// The gzipped profile. Throws Error when no member gave a snapshot (the
// message says why, from left_out).
std::string encode_tree_heap(const TreeHeap& heap);

}  // namespace memprofile
