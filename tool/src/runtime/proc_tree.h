// The process tree as /proc shows it now: which processes descend from one,
// for the commands that act on a service's every process (start, stop,
// snapshot, status). Read once per command; a process that starts or ends
// meanwhile is seen or not, never half.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace memprofile {

struct ProcEntry {
  long pid = 0, ppid = 0;
  std::string comm;  // the kernel's short name (/proc/PID/stat)
  char state = '?';  // R, S, D, T, Z...: the kernel's one letter
  unsigned long long start_ticks = 0;  // its start, in clock ticks after boot
};

// Most processes read from /proc (a machine's pid_max is 4M at most; a
// pod's tree is far smaller).
constexpr size_t kMaxProcesses = 1 << 20;

// Every process under `proc` (default /proc), by pid. Throws FileError when
// `proc` cannot be listed.
std::map<long, ProcEntry> read_process_table(const std::string& proc = "/proc");

// `root` and its descendants, each parent before its children (breadth
// first, by pid within a level); empty when `root` is not in the table.
std::vector<long> process_tree(const std::map<long, ProcEntry>& table, long root);

// When the process started, in seconds since the epoch (its start ticks
// plus the boot time); 0 when it cannot be read.
double process_started(long pid, const std::string& proc = "/proc");

// /proc/PID/exe's target, "" when it cannot be read (another user's
// process, a kernel thread, gone).
std::string process_exe(long pid, const std::string& proc = "/proc");

// Gone, or a zombie its parent has not reaped: /proc/PID/exe cannot be
// read for either, and neither is another user's process.
bool process_ended(long pid, const std::string& proc = "/proc");

}  // namespace memprofile
