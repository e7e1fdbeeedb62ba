// `memprofile start|stop|snapshot|status [PID] [--only]`: drive the processes
// that `memprofile exec` started, without restarting them, through the
// control library's sockets in the output directory (ctl/ctl.h). Run in the
// pod with kubectl exec; PID 1 is the application when exec is the
// entrypoint. A service is a tree of processes (prefork workers, a backend
// per connection): the command acts on PID and every descendant that serves
// a socket, and names in one line each descendant it cannot reach and why.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "base/json_text.h"
#include "base/unique_fd.h"
#include "cli/commands.h"
#include "profile/heap_profile.h"
#include "runtime/control_client.h"
#include "runtime/memory.h"
#include "runtime/proc_tree.h"
#include "runtime/backend.h"

namespace memprofile {

using nlohmann::json;

namespace {

struct ControlOptions {
  std::string action;
  long pid = 1;
  bool pid_given = false;
  std::string output_dir, config = kDefaultConfigPath;
  double timeout = 60;
  bool json = false;
  bool only = false;  // PID alone, not its descendants
};

std::string mib(uint64_t bytes) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

// Where the process's control socket is: --output-dir, else what the
// launcher told the process (its environment as exec'd), else this
// command's MEMPROFILE_OUTPUT_DIR, the config file and the default.
std::string control_dir(const ControlOptions& o) {
  if (!o.output_dir.empty()) return o.output_dir;
  auto env = process_environ("/proc/" + std::to_string(o.pid));
  if (auto it = env.find("MEMPROFILE_CTL_DIR"); it != env.end() && !it->second.empty()) return it->second;
  LauncherConfig cfg;
  load_launcher_config(o.config, cfg);
  apply_env_overrides(cfg);
  return cfg.output_dir;
}

// Whether two paths name one file (by device and inode).
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// memray's interpreters (memprofile exec --backend memray) serve their
// socket from the bootstrap's thread; one that serves none was started
// without the control settings (an exec before they existed, a config with
// the library missing) or its thread could not start. The processes memray
// tracks, PID alone (--only) or its tree (its target program, with
// memprofile's variables; the target looked up in the process's own root, a
// container's seen from outside too), as one line that says so and where
// their captures are; "" when none is.
std::string memray_unserved(long pid, bool only) {
  std::vector<long> tree;
  if (!only) tree = process_tree(read_process_table(), pid);
  if (tree.empty()) tree.push_back(pid);
  std::string tracked, dir;
  size_t n = 0;
  for (long p : tree) {
    const std::string proc = "/proc/" + std::to_string(p);
    auto env = process_environ(proc);
    auto d = env.find("MEMPROFILE_MEMRAY_DIR"), t = env.find("MEMPROFILE_MEMRAY_TARGET");
    if (d == env.end() || t == env.end() || !same_file(proc + "/exe", proc + "/root" + t->second)) continue;
    tracked += (tracked.empty() ? "" : ", ") + std::to_string(p);
    dir = d->second;
    ++n;
  }
  if (!n) return "";
  return (n == 1 ? "process " + tracked + " runs" : "processes " + tracked + " run") +
         " memray (memprofile exec --backend memray) but serve" + (n == 1 ? "s" : "") +
         " no control socket (started without the control settings, or the bootstrap's control thread could not "
         "start: see the service's stderr): each writes its own capture in " + dir +
         " (memray.PID.bin, a forked worker's memray.PID.bin.CHILD) from its start to its exit; memprofile report " +
         dir + " reads them";
}

// The socket for the pid asked for. Without a PID, when 1 has none (a
// dispatcher's child is the profiled process), the only one there is.
std::pair<std::string, long> find_socket(const ControlOptions& o, const std::string& dir) {
  std::string path = dir + "/" + ctl_socket_name(o.pid);
  // Whatever has the name is asked: the asking checks that it is the
  // process's socket (control_client.h) and says why when it is not.
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) return {path, o.pid};
  // A PID with no process here (it ended, a typo, another pid namespace)
  // says so beside whatever else is wrong: the directory it was looked up
  // in may be only the config's default.
  const std::string absent = process_ended(o.pid) ? "; there is no process " + std::to_string(o.pid) +
                                                        " here (it ended, or runs in another pid namespace)"
                                                  : "";
  std::vector<long> pids;
  try {
    pids = socket_pids(dir);
  } catch (const FileError& e) {
    if (absent.empty()) throw;
    throw Error(e.what() + absent);
  }
  if (!o.pid_given && pids.size() == 1) {
    std::cerr << "memprofile: process 1 has no control socket; using process " << pids[0] << "'s\n";
    return {dir + "/" + ctl_socket_name(pids[0]), pids[0]};
  }
  std::string others;
  for (long p : pids) others += (others.empty() ? "" : ", ") + std::to_string(p);
  if (std::string memray = pids.empty() ? memray_unserved(o.pid, o.only) : ""; !memray.empty())
    throw FileError(path, memray);
  throw FileError(path, "no control socket: process " + std::to_string(o.pid) +
                            " was not started by memprofile exec with the control library" +
                            (others.empty() ? std::string(" (none in " + dir + ")")
                                            : " (sockets for: " + others + "; give that PID)") +
                            absent);
}

void print_status(const json& r) {
  auto str = [&](const char* k) { return r.value(k, std::string()); };
  auto num = [&](const char* k) { return r.value(k, uint64_t{0}); };
  const bool none = str("backend") == "none";
  std::cout << "pid " << r.value("pid", 0) << ": "
            << (none ? std::string("no heap profiler (--backend none): its memory only")
                     : str("backend") + ", recording " + (r.value("recording", false) ? "on" : "off"));
  if (!str("stopped_reason").empty()) std::cout << " (stopped: " << str("stopped_reason") << ")";
  std::cout << "\n";
  if (r.value("parent", 0) > 0 || !str("program").empty())
    std::cout << "  " << (r.value("parent", 0) > 0 ? "forked from pid " + std::to_string(r.value("parent", 0)) + ", "
                                                   : std::string())
              << "program " << str("program") << "\n";
  if (num("snapshot_every_ms"))
    std::cout << "  a " << (none ? "memory record every " : "snapshot every ") << num("snapshot_every_ms") / 1000.0
              << (none ? " s (" : " s while recording (") << num("snapshots_scheduled") << " so far)\n";
  json snaps = r.value("snapshots", json::array());
  std::vector<json> list(snaps.begin(), snaps.end());
  std::sort(list.begin(), list.end(),
            [](const json& a, const json& b) { return a.value("seq", uint64_t{0}) < b.value("seq", uint64_t{0}); });
  std::cout << (none ? "memory records: " : "profiles: ") << r.value("own_files", static_cast<unsigned>(list.size())) << " of this process, " << mib(num("own_bytes")) << "; "
            << mib(num("disk_bytes")) << " in " << str("output_dir") << " of a "
            << (num("max_bytes") ? mib(num("max_bytes")) : std::string("unlimited")) << " budget; "
            << mib(num("free_bytes")) << " free (floor " << mib(num("min_free_bytes")) << ")\n";
  if (r.value("not_its_own", 0u))
    std::cout << "  (" << r.value("not_its_own", 0u) << " more under its names are not its own: another user's, or "
              << "not regular files; not shown)\n";
  if (list.size() < r.value("own_files", 0u)) std::cout << "  (the " << list.size() << " listed; all are in " << str("output_dir") << ")\n";
  for (const auto& s : list)
    std::cout << "  " << s.value("path", std::string()) << "  " << mib(s.value("bytes", uint64_t{0})) << "\n";
}

// The allocator's figures from a control reply, in one model (runtime/memory.h).
AllocatorView allocator_view(const json& r) {
  AllocatorView a;
  auto it = r.find("allocator");
  if (it == r.end() || !it->is_object()) return a;
  const json& j = *it;
  a.known = true;
  a.name = j.value("name", std::string());
  if (a.name == "jemalloc") {
    a.allocated = j.value("allocated", uint64_t{0});
    a.resident = j.value("resident", uint64_t{0});
  } else {
    a.allocated = j.value("in_use", uint64_t{0});
    a.resident = j.value("arena", uint64_t{0}) + j.value("mmapped", uint64_t{0});
  }
  return a;
}

json memory_json(const ProcessMemory& m) {
  if (!m.known) return nullptr;
  return {{"rss", m.rss}, {"anon", m.anon}, {"file", m.file}, {"shmem", m.shmem}, {"swap", m.swap}};
}

json gap_json(const std::vector<GapItem>& gap) {
  json out = json::array();
  for (const auto& g : gap) out.push_back({{"what", g.what}, {"bytes", g.bytes}, {"how", g.how}});
  return out;
}

// Where one process's memory is: the kernel's split, the allocator's view,
// and the gap between them by cause.
void print_memory(const ProcessMemory& m, const json& reply) {
  if (!m.known) {
    std::cout << "  memory: /proc cannot say (the process is gone, or another user's)\n";
    return;
  }
  std::cout << "  memory: RSS " << mib(m.rss) << " (anonymous " << mib(m.anon) << ", file " << mib(m.file) << ", shmem "
            << mib(m.shmem) << "), swap " << mib(m.swap) << "\n";
  auto it = reply.find("allocator");
  if (it != reply.end() && it->is_object()) {
    const json& j = *it;
    auto n = [&](const char* k) { return mib(j.value(k, uint64_t{0})); };
    if (j.value("name", std::string()) == "jemalloc")
      std::cout << "  allocator (jemalloc): allocated " << n("allocated") << ", active " << n("active") << ", resident "
                << n("resident") << ", mapped " << n("mapped") << ", retained " << n("retained") << ", metadata "
                << n("metadata") << "\n";
    else
      std::cout << "  allocator (glibc malloc): arena " << n("arena") << ", in use " << n("in_use") << ", free " << n("free")
                << ", mmapped " << n("mmapped") << (j.value("wraps_past_2gib", false) ? " (glibc < 2.33: mallinfo, wraps past 2 GiB)" : "")
                << "\n";
  } else if (reply.is_object()) {
    std::cout << "  allocator: not reported by this process\n";
  }
  std::vector<GapItem> gap = memory_gap(m, allocator_view(reply));
  if (gap.empty()) return;
  std::cout << "  outside the allocator's allocations:";
  for (size_t i = 0; i < gap.size(); ++i) std::cout << (i ? ";" : "") << " " << gap[i].what << " " << mib(gap[i].bytes);
  std::cout << "\n";
  // Attached is not seeing: a heap profiler whose malloc holds a small part
  // of the process's anonymous memory will show that part only.
  const std::string backend = reply.value("backend", std::string());
  const uint64_t outside = gap.size() > 1 ? gap[1].bytes : 0;
  if (!backend.empty() && backend != "none" && outside >= (32ull << 20) && outside > m.anon / 2)
    std::cout << "  most of its memory is outside the malloc " << backend << " sees (" << mib(outside) << " of "
              << mib(m.anon) << " anonymous): an allocator of its own, pymalloc, or a managed heap; the profile will "
              << "not show it (memprofile check --preload LIB PROGRAM says which)\n";
}

// The profile's own view of one process: bytes in use at its newest
// snapshot, scaled as report scales them (a jemalloc dump), or why status
// does not say (a continuous trace, no snapshot yet, none loaded).
struct ProfileInUse {
  bool known = false;
  double bytes = 0;
  std::string snapshot;  // its file
  std::string why;       // when not known ("" for --backend none: nothing to say)
};

// Larger dumps are left to report: status answers in seconds.
constexpr uint64_t kStatusDumpLimit = 64ull << 20;

std::string read_dump(const std::string& path) {
  // Non-blocking: a FIFO or a device under the name must not hold status.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  struct stat st;
  if (!fd || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw FileError(path, "cannot read it as a regular file");
  fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  if (static_cast<uint64_t>(st.st_size) > kStatusDumpLimit)
    throw FileError(path, mib(static_cast<uint64_t>(st.st_size)) + ": larger than status reads; memprofile report reads it");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  for (ssize_t n; got < text.size() && (n = ::read(fd.get(), &text[got], text.size() - got)) > 0;) got += static_cast<size_t>(n);
  text.resize(got);
  return text;
}

ProfileInUse profile_in_use(const json& reply, const std::string& dir) {
  ProfileInUse p;
  const std::string backend = reply.value("backend", std::string());
  if (backend == "none") return p;
  json snaps = reply.value("snapshots", json::array());
  std::vector<const json*> by_age;  // newest first
  for (const auto& s : snaps)
    if (s.is_object()) by_age.push_back(&s);
  std::stable_sort(by_age.begin(), by_age.end(), [](const json* a, const json* b) {
    return a->value("seq", uint64_t{0}) > b->value("seq", uint64_t{0});
  });
  const json* newest = by_age.empty() ? nullptr : by_age.front();
  if (backend != "jemalloc") {
    p.why = backend + " writes one continuous file" +
            (newest ? " (" + newest->value("path", std::string()) + ")" : std::string()) +
            ": memprofile report reads what is in use from it";
    return p;
  }
  if (!newest) {
    p.why = "no snapshot yet (memprofile snapshot, or --snapshot-every)";
    return p;
  }
  // The newest dump jemalloc has finished: one it is still writing (an
  // interval dump, at a fast leak's pace) does not parse yet, and the one
  // before it is the last whole snapshot, which the line then names. One
  // step back only; when neither parses, the newest's error says why.
  for (size_t i = 0; i < std::min<size_t>(by_age.size(), 2); ++i) {
    std::string path = by_age[i]->value("path", std::string());
    std::string file = dir + "/" + path.substr(path.rfind('/') + 1);
    try {
      p.bytes = parse_heap_dump(read_dump(file), file).total_bytes;
      p.snapshot = file;
      p.known = true;
      p.why.clear();
      return p;
    } catch (const Error& e) {
      if (i > 0) continue;
      p.snapshot = file;
      p.why = e.what();
    }
  }
  return p;
}

// One process of the tree: its answer, or why it has none.
struct Member {
  long pid = 0, parent = 0;
  std::string comm;
  std::string socket;  // "" when it serves none
  json reply;          // its answer (null when none)
  ProcessMemory memory;  // the kernel's view (status)
  ProfileInUse profile;  // the profile's (status)
  std::string why;     // why it is not reached, or the request's failure
  std::string error;   // the connection's own error ("" when it answered, or has no socket)
  bool unanswered = false;  // a live socket that gave no answer (stopped, busy, refused us)
  bool refused = false;     // its socket, or its answer, is not that process's own (control_client.h)
  bool local = false;       // in this pid namespace's /proc (its end can be seen)
};

// Why a process of the tree serves no socket, in words: it runs another
// program (never profiled, by design), or the profiler does not record
// forked children, or nothing is known.
std::string unserved_reason(long pid, const std::string& served_program, const std::string& backend) {
  std::string exe = process_exe(pid);
  if (exe.empty() && process_ended(pid)) return "not reachable: it ended while the command ran";
  if (exe.empty()) return "not reachable: no control socket, and its program cannot be read (another user's?)";
  if (!served_program.empty() && exe != served_program)
    return "not profiled: it runs " + exe + ", not the profiled program (children that exec another program never "
           "carry the profiler)";
  if (backend == "memray")
    return "not tracked: it runs the interpreter, but no socket of memprofile's bootstrap (started with -I, -E or -S, "
           "or a PYTHONPATH of its own; or its control thread could not start: see the service's stderr)";
  if (!backend.empty() && backend != "jemalloc" && backend != "none")
    return "not profiled: a forked child; " + backend + " does not record a child forked without exec";
  return "not reachable: no control socket (started before memprofile exec, or the control library could not "
         "serve: see the service's log)";
}

// The one process find_socket names (--only, or a tree that serves nothing:
// its errors are the ones a single process always had).
std::vector<Member> single(const ControlOptions& o, const std::string& dir) {
  auto [path, pid] = find_socket(o, dir);
  Member m;
  m.pid = pid;
  m.socket = path;
  return {m};
}

// The roots to walk: PID, or without a PID, when 1 serves nothing (a
// dispatcher's child is the profiled process), the tops of the served trees
// (sockets whose parent serves none).
std::vector<long> tree_roots(const ControlOptions& o, const std::string& dir, const std::map<long, ProcEntry>& table,
                             bool pid_serves) {
  if (pid_serves || o.pid_given || !table.count(o.pid)) return {o.pid};
  std::set<long> served;
  for (long p : socket_pids(dir))
    if (table.count(p)) served.insert(p);
  std::vector<long> roots;
  for (long p : served)
    if (!served.count(table.at(p).ppid)) roots.push_back(p);
  if (roots.empty()) return {o.pid};
  std::string which;
  for (long r : roots) which += (which.empty() ? "" : ", ") + std::to_string(r);
  std::cerr << "memprofile: process 1 has no control socket; using process " << which << "'s tree\n";
  return roots;
}

// The processes to act on: PID alone (--only), or PID and its descendants.
// Listed: the processes that serve, the root, and the children of a
// process that serves (a worker the profiler does not record, a child that
// exec'd another program): not the rest of a machine under a PID that is
// not memprofile's. The descendants left out (what a child that exec'd
// another program started in turn) go to `beyond`: no profiler reaches
// them, but they are the tree's, and its memory counts them.
std::vector<Member> members(const ControlOptions& o, const std::string& dir, std::vector<long>& beyond) {
  if (o.only) return single(o, dir);
  // Anything under a member's socket name is asked, and refused with a
  // reason when it is not that process's socket.
  auto socket_for = [&](long pid) {
    std::string path = dir + "/" + ctl_socket_name(pid);
    struct stat st;
    return lstat(path.c_str(), &st) == 0 ? path : std::string();
  };
  auto table = read_process_table();
  std::vector<Member> all;
  std::set<long> seen, serving;
  for (long root : tree_roots(o, dir, table, !socket_for(o.pid).empty())) {
    std::vector<long> tree = process_tree(table, root);
    if (tree.empty()) tree.push_back(root);  // gone, or another namespace: its socket decides
    for (long pid : tree) {
      if (!seen.insert(pid).second) continue;
      Member m;
      m.pid = pid;
      if (auto it = table.find(pid); it != table.end()) {
        m.parent = it->second.ppid;
        m.comm = it->second.comm;
        m.local = true;
      }
      m.socket = socket_for(pid);
      if (!m.socket.empty()) serving.insert(pid);
      all.push_back(std::move(m));
    }
  }
  // Nothing in the tree serves: a PID that is not memprofile's is an error,
  // said as it was for one process.
  if (serving.empty()) return single(o, dir);
  std::vector<Member> out;
  for (auto& m : all) {
    if (!m.socket.empty() || m.pid == all.front().pid || serving.count(m.parent))
      out.push_back(std::move(m));
    else
      beyond.push_back(m.pid);
  }
  return out;
}

// Asks every member that serves, all at once within one deadline; the
// others get their reason.
void ask_all(std::vector<Member>& ms, const std::string& request, double timeout) {
  std::vector<ControlAsk> asks;
  std::vector<Member*> asked;
  for (auto& m : ms)
    if (!m.socket.empty()) {
      asks.push_back({m.pid, m.socket});
      asked.push_back(&m);
    }
  std::vector<ControlAnswer> answers = ask_controls(asks, request, timeout);
  std::string program, backend;
  for (size_t i = 0; i < asked.size(); ++i) {
    Member& m = *asked[i];
    ControlAnswer& a = answers[i];
    switch (a.outcome) {
      case ControlAnswer::Outcome::Answered:
        m.reply = std::move(a.reply);
        if (program.empty()) program = m.reply.value("program", std::string());
        if (backend.empty()) backend = m.reply.value("backend", std::string());
        if (!m.reply.value("ok", false)) m.why = m.reply.value("error", std::string("failed"));
        break;
      case ControlAnswer::Outcome::Stale:
        // A child that exec'd another program or ended leaves its socket
        // until the first process clears it: not an error of the tree.
        m.why = "not reachable: " + a.error;
        m.error = a.error;
        m.socket.clear();
        break;
      case ControlAnswer::Outcome::Unanswered:
      case ControlAnswer::Outcome::Refused:
        m.error = a.error;
        if (m.local && process_ended(m.pid)) {
          // It ended while it was asked (a worker recycled): gone, like a
          // stale socket.
          m.why = "not reachable: it ended while the command ran (" + a.error + ")";
          m.socket.clear();
        } else {
          // A live process that did not answer (stopped, busy, not ours to
          // ask), or whose socket is not its own: the command did not reach
          // it, and says so in its exit code.
          m.why = (a.outcome == ControlAnswer::Outcome::Refused ? "not reached, refused: " : "") + a.error;
          m.unanswered = true;
          m.refused = a.outcome == ControlAnswer::Outcome::Refused;
        }
        break;
    }
  }
  for (auto& m : ms)
    if (m.socket.empty() && m.why.empty()) m.why = unserved_reason(m.pid, program, backend);
}

json member_json(const Member& m) {
  json j = m.reply.is_object() ? m.reply : json{{"ok", false}, {"pid", m.pid}};
  if (m.memory.known) {
    j["memory"] = memory_json(m.memory);
    j["gap"] = gap_json(memory_gap(m.memory, allocator_view(m.reply)));
  }
  if (m.profile.known)
    j["profile"] = {{"bytes_in_use", m.profile.bytes}, {"snapshot", m.profile.snapshot}};
  else if (!m.profile.why.empty())
    j["profile"] = {{"error", m.profile.why}};
  if (!m.reply.is_object()) {
    j["parent"] = m.parent;
    j["served"] = false;
    j["error"] = m.why;
    if (m.unanswered) j["unanswered"] = true;
    if (m.refused) j["refused"] = true;
    if (!m.comm.empty()) j["comm"] = m.comm;
  } else {
    j["served"] = true;
  }
  return j;
}

// What one command learnt of the tree: every member's answer, how many
// answered and failed, and for status where the memory is.
struct TreeAnswer {
  std::string dir;
  std::vector<Member> ms;
  std::vector<long> beyond;  // descendants under processes that are not profiled (members)
  size_t served = 0, failed = 0, unanswered = 0;
  uint64_t rss_all = 0, rss_profiled = 0, rss_beyond = 0;
  CgroupMemory cgroup;
};

TreeAnswer ask_tree(const ControlOptions& o) {
  TreeAnswer t;
  t.dir = control_dir(o);
  t.ms = members(o, t.dir, t.beyond);
  ask_all(t.ms, o.action, o.timeout);
  for (const auto& m : t.ms) {
    if (m.unanswered) ++t.unanswered;
    if (!m.reply.is_object()) continue;
    ++t.served;
    if (!m.reply.value("ok", false)) ++t.failed;
  }
  // Every answer says what it covers: the memory of the whole tree, and
  // the share of it in the processes that are profiled.
  if (o.action == "status") {
    for (auto& m : t.ms) {
      m.memory = read_process_memory(m.pid);
      if (m.reply.is_object()) m.profile = profile_in_use(m.reply, t.dir);
      t.rss_all += m.memory.rss;
      if (m.reply.is_object()) t.rss_profiled += m.memory.rss;
    }
    for (long pid : t.beyond) t.rss_beyond += read_process_memory(pid).rss;
    t.rss_all += t.rss_beyond;
    t.cgroup = read_cgroup_memory(t.ms.front().pid);
  }
  return t;
}

std::string share(uint64_t part, uint64_t whole) {
  return whole ? std::to_string(static_cast<int>(100.0 * static_cast<double>(part) / static_cast<double>(whole) + 0.5)) + " %"
               : std::string("-");
}

// The first process's answer, as for one process, with the whole tree.
json tree_json(const ControlOptions& o, const TreeAnswer& t) {
  json j = member_json(t.ms.front());
  j["processes"] = json::array();
  for (const auto& m : t.ms) j["processes"].push_back(member_json(m));
  j["tree"] = {{"processes", t.ms.size() + t.beyond.size()}, {"served", t.served}, {"failed", t.failed},
               {"unanswered", t.unanswered}, {"beyond", t.beyond}};
  if (o.action == "status") {
    const CgroupMemory& cg = t.cgroup;
    j["tree"]["rss"] = t.rss_all;
    j["tree"]["rss_profiled"] = t.rss_profiled;
    j["tree"]["rss_beyond"] = t.rss_beyond;
    j["cgroup"] = cg.known ? json{{"version", cg.version}, {"path", cg.path}, {"current", cg.current}, {"anon", cg.anon},
                                  {"file", cg.file}, {"shmem", cg.shmem}, {"kernel", cg.kernel}}
                           : json{{"error", cg.why}};
  }
  return j;
}

// One line on stderr for the descendants no profiler reaches (under a
// child that exec'd another program), with the first of their pids.
void print_beyond(const ControlOptions& o, const std::vector<long>& beyond) {
  if (beyond.empty()) return;
  constexpr size_t kNamed = 8;
  std::string pids;
  for (size_t i = 0; i < beyond.size() && i < kNamed; ++i) pids += (i ? ", " : "") + std::to_string(beyond[i]);
  if (beyond.size() > kNamed) pids += " and " + std::to_string(beyond.size() - kNamed) + " more";
  std::cerr << "memprofile: " << o.action << ": " << beyond.size() << " more process" << (beyond.size() == 1 ? "" : "es")
            << " of the tree, under processes that are not profiled (their children never carry the profiler), "
               "not reached: pid"
            << (beyond.size() == 1 ? " " : "s ") << pids << "\n";
}

// Each member's line (or block, for status); one on stderr for each that
// was not reached or refused.
void print_members(const ControlOptions& o, const TreeAnswer& t) {
  for (const auto& m : t.ms) {
    if (!m.reply.is_object()) {
      std::cerr << "memprofile: " << o.action << ": pid " << m.pid << (m.comm.empty() ? "" : " (" + m.comm + ")")
                << ": " << m.why << "\n";
      continue;
    }
    const json& r = m.reply;
    if (!r.value("ok", false)) {
      std::cerr << "memprofile: " << o.action << " " << m.pid << ": " << m.why << "\n";
    } else if (o.action == "snapshot" && r.contains("marks")) {
      // memray: the moment marked in the capture being written.
      char at[32];
      std::snprintf(at, sizeof at, "%.1f", static_cast<double>(r.value("mark_at_ms", uint64_t{0})) / 1000);
      std::cout << r.value("snapshot", std::string()) << " at " << at << " s (mark " << r.value("mark", 0u) << " in "
                << r.value("marks", std::string()) << "; memprofile report ends a span there)\n";
    } else if (o.action == "snapshot") {
      std::cout << r.value("snapshot", std::string()) << "\n";
    } else if (o.action == "status") {
      print_status(r);
      print_memory(m.memory, r);
      if (m.profile.known)
        std::cout << "  profile: " << mib(static_cast<uint64_t>(m.profile.bytes)) << " in use at the last snapshot ("
                  << m.profile.snapshot << "), scaled as memprofile report scales it\n";
      else if (!m.profile.why.empty())
        std::cout << "  profile: " << m.profile.why << "\n";
    } else {
      std::cout << "pid " << m.pid << ": " << r.value("backend", std::string()) << ", recording "
                << (r.value("recording", false) ? "on" : "off") << "\n";
    }
  }
  print_beyond(o, t.beyond);
}

// status's last lines: the tree's RSS and its profiled share, the cgroup.
void print_tree_memory(const TreeAnswer& t) {
  size_t all = t.ms.size() + t.beyond.size();
  if (all > 1)
    std::cout << "tree of pid " << t.ms.front().pid << ": " << all << " processes, " << t.served << " served"
              << (all > t.served ? ", " + std::to_string(all - t.served) + " not reached (said above)" : "")
              << "; RSS " << mib(t.rss_all) << ", " << share(t.rss_profiled, t.rss_all) << " of it in the profiled processes\n";
  const CgroupMemory& cg = t.cgroup;
  if (cg.known)
    std::cout << "cgroup " << cg.path << " (" << cg.version << "): " << mib(cg.current)
              << " charged (what the OOM killer counts): anon " << mib(cg.anon) << ", file " << mib(cg.file)
              << ", shmem " << mib(cg.shmem) << (cg.version == "v2" ? ", kernel " + mib(cg.kernel) : "")
              << "; the tree's RSS is " << share(t.rss_all, cg.current) << " of it\n";
  else
    std::cout << "cgroup: " << cg.why << "\n";
}

ExitCode run_control(const ControlOptions& o) {
  if (o.pid <= 0) throw Error("memprofile " + o.action + ": PID must be a positive number");
  TreeAnswer t = ask_tree(o);
  if (t.served == 0) {
    // Nobody answered: the first member's reason is the error, as it was
    // for one process.
    if (!t.ms.front().error.empty()) throw Error(t.ms.front().error);
    throw FileError(t.dir + "/" + ctl_socket_name(t.ms.front().pid), t.ms.front().why);
  }
  if (o.json) {
    std::cout << json_text(tree_json(o, t)) << "\n";
  } else {
    print_members(o, t);
    if (o.action == "status") print_tree_memory(t);
  }
  // A live process that gave no answer is the tree's "no answer within
  // --timeout": exit 2, as for one process; one that answered it could
  // not, 1.
  if (t.unanswered) return ExitCode::InputError;
  return t.failed ? ExitCode::NotProfilable : ExitCode::Ok;
}

}  // namespace

void setup_control(CLI::App& app, ExitCode& exit_code) {
  struct Action {
    const char* name;
    const char* help;
  };
  for (const Action& a : {
           Action{"start", "Start recording in a running process (memprofile exec --dormant), without a restart"},
           Action{"stop", "Stop recording in a running process; the profiles so far stay"},
           Action{"snapshot", "Write a heap profile of a running process now and print its path (jemalloc), or mark the "
                              "moment in its capture (memray)"},
           Action{"status", "Say whether a process is recording, its snapshots and the disk they use"},
       }) {
    auto o = std::make_shared<ControlOptions>();
    o->action = a.name;
    CLI::App* cmd = app.add_subcommand(a.name, a.help);
    cmd->add_option("pid", o->pid, "the process and its descendants (default 1, the container's entrypoint: the whole container)")
        ->each([o](const std::string&) { o->pid_given = true; });
    cmd->add_option("--output-dir", o->output_dir,
                    "where its control socket is (default: what exec told the process, else the config's)");
    cmd->add_option("--config", o->config, "launcher config file")->capture_default_str();
    cmd->add_option("--timeout", o->timeout, "seconds to wait for the answer")->capture_default_str();
    cmd->add_flag("--json", o->json, "print the answers as JSON (the first process's, with every process under \"processes\")");
    cmd->add_flag("--only", o->only, "act on PID alone, not on the processes it forked");
    cmd->callback([o, &exit_code] { exit_code = run_control(*o); });
  }
}

}  // namespace memprofile
