#include "runtime/proc_tree.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "base/error.h"

namespace memprofile {

namespace {

// "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so it
// ends at the last ')'.
bool parse_stat(const std::string& line, ProcEntry& e) {
  size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  e.comm = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 1));
  std::string state;
  if (!(rest >> state >> e.ppid)) return false;
  e.state = state[0];
  // Fields 5 to 21, then 22: the start, in clock ticks after boot.
  std::string skip;
  for (int field = 5; field < 22 && rest >> skip; ++field) {
  }
  rest >> e.start_ticks;
  return true;
}

bool all_digits(const char* s) {
  if (!*s) return false;
  for (; *s; ++s)
    if (*s < '0' || *s > '9') return false;
  return true;
}

}  // namespace

std::map<long, ProcEntry> read_process_table(const std::string& proc) {
  std::map<long, ProcEntry> table;
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(proc.c_str()), closedir);
  if (!d) throw FileError(proc, std::string("cannot list the processes: ") + std::strerror(errno));
  while (dirent* ent = readdir(d.get())) {
    if (!all_digits(ent->d_name) || std::strlen(ent->d_name) > 9) continue;
    if (table.size() >= kMaxProcesses) break;
    std::ifstream in(proc + "/" + ent->d_name + "/stat");
    std::string line;
    ProcEntry e;
    e.pid = std::stol(ent->d_name);
    if (in && std::getline(in, line) && parse_stat(line, e)) table[e.pid] = std::move(e);
  }
  return table;
}

std::vector<long> process_tree(const std::map<long, ProcEntry>& table, long root) {
  std::vector<long> out;
  if (!table.count(root)) return out;
  std::multimap<long, long> children;
  for (const auto& [pid, e] : table)
    if (pid != root || e.ppid != pid) children.emplace(e.ppid, pid);
  out.push_back(root);
  // Each pid is visited once: the table's parent links form a forest.
  for (size_t i = 0; i < out.size() && out.size() <= table.size(); ++i) {
    auto [first, last] = children.equal_range(out[i]);
    for (auto it = first; it != last; ++it)
      if (it->second != root) out.push_back(it->second);
  }
  return out;
}

bool process_ended(long pid, const std::string& proc) {
  std::ifstream in(proc + "/" + std::to_string(pid) + "/stat");
  std::string line;
  ProcEntry e;
  if (!in || !std::getline(in, line) || !parse_stat(line, e)) return true;
  return e.state == 'Z' || e.state == 'X';
}

double process_started(long pid, const std::string& proc) {
  std::ifstream in(proc + "/" + std::to_string(pid) + "/stat");
  std::string line;
  ProcEntry e;
  if (!in || !std::getline(in, line) || !parse_stat(line, e) || !e.start_ticks) return 0;
  std::ifstream stat(proc + "/stat");
  long long btime = 0;
  for (int n = 0; n < 4096 && std::getline(stat, line); ++n)
    if (line.rfind("btime ", 0) == 0) btime = std::strtoll(line.c_str() + 6, nullptr, 10);
  long hz = sysconf(_SC_CLK_TCK);
  return btime && hz > 0 ? static_cast<double>(btime) + static_cast<double>(e.start_ticks) / static_cast<double>(hz) : 0;
}

std::string process_exe(long pid, const std::string& proc) {
  char buf[4096];
  std::string link = proc + "/" + std::to_string(pid) + "/exe";
  ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace memprofile
