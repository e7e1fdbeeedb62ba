#include "runtime/tree_control.h"

#include <sys/stat.h>
#include <unistd.h>

#include <iostream>
#include <set>

#include "base/error.h"
#include "runtime/backend.h"
#include "runtime/control_client.h"
#include "runtime/proc_tree.h"

namespace memprofile {

using nlohmann::json;

namespace {

// Where the process's control socket is: --output-dir, else what the
// launcher told the process (its environment as exec'd), else this
// command's MEMPROFILE_OUTPUT_DIR, the config file and the default.
std::string control_dir(const ControlRequest& o) {
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
std::pair<std::string, long> find_socket(const ControlRequest& o, const std::string& dir) {
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

json memory_json(const ProcessMemory& m) {
  if (!m.known) return nullptr;
  return {{"rss", m.rss}, {"anon", m.anon}, {"file", m.file}, {"shmem", m.shmem}, {"swap", m.swap}};
}

json gap_json(const std::vector<GapItem>& gap) {
  json out = json::array();
  for (const auto& g : gap) out.push_back({{"what", g.what}, {"bytes", g.bytes}, {"how", g.how}});
  return out;
}

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
std::vector<Member> single(const ControlRequest& o, const std::string& dir) {
  auto [path, pid] = find_socket(o, dir);
  Member m;
  m.pid = pid;
  m.socket = path;
  return {m};
}

// The roots to walk: PID, or without a PID, when 1 serves nothing (a
// dispatcher's child is the profiled process), the tops of the served trees
// (sockets whose parent serves none).
std::vector<long> tree_roots(const ControlRequest& o, const std::string& dir, const std::map<long, ProcEntry>& table,
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
std::vector<Member> members(const ControlRequest& o, const std::string& dir, std::vector<long>& beyond) {
  if (o.only) return single(o, dir);
  // Anything under a member's socket name is asked, and refused with a
  // reason when it is not that process's socket.
  auto socket_for = [&](long pid) {
    std::string path = dir + "/" + ctl_socket_name(pid);
    struct stat st;
    return lstat(path.c_str(), &st) == 0 ? path : std::string();
  };
  auto table = read_process_table();
  const long self = getpid();
  std::vector<Member> all;
  std::set<long> seen, serving;
  for (long root : tree_roots(o, dir, table, !socket_for(o.pid).empty())) {
    std::vector<long> tree = process_tree(table, root);
    if (tree.empty()) tree.push_back(root);  // gone, or another namespace: its socket decides
    for (long pid : tree) {
      // The asker is not a member, nor is exec --serve's child, which runs in
      // the tree it serves (by the name it gives itself: a process that
      // takes that name only leaves itself out of the listing).
      if (pid == self || !seen.insert(pid).second) continue;
      if (auto it = table.find(pid); it != table.end() && it->second.comm == kServeChildName && pid != root) continue;
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

}  // namespace

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


TreeAnswer ask_tree(const ControlRequest& o, const InUseReader& in_use) {
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
      if (m.reply.is_object() && in_use) m.profile = in_use(m.reply, t.dir);
      t.rss_all += m.memory.rss;
      if (m.reply.is_object()) t.rss_profiled += m.memory.rss;
    }
    for (long pid : t.beyond) t.rss_beyond += read_process_memory(pid).rss;
    t.rss_all += t.rss_beyond;
    t.cgroup = read_cgroup_memory(t.ms.front().pid);
  }
  return t;
}

json tree_json(const ControlRequest& o, const TreeAnswer& t) {
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

}  // namespace memprofile
