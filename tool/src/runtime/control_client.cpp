#include "runtime/control_client.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "base/error.h"
#include "base/json_text.h"
#include "base/unique_fd.h"
#include "runtime/backend.h"
#include "runtime/proc_tree.h"

namespace memprofile {

using nlohmann::json;
using Outcome = ControlAnswer::Outcome;
using Clock = std::chrono::steady_clock;

// The pids that have a control socket in `dir`.
std::vector<long> socket_pids(const std::string& dir) {
  std::vector<long> pids;
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
  if (!d) throw FileError(dir, std::string("cannot read the output directory: ") + strerror(errno));
  while (struct dirent* e = readdir(d.get())) {
    long pid = 0;
    char tail[8] = "";
    if (sscanf(e->d_name, "memprofile-ctl.%ld.%7s", &pid, tail) == 2 && std::string(tail) == "sock" &&
        e->d_name == ctl_socket_name(pid))
      pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

namespace {

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// The uid that owns /proc/PID (the process's effective uid); -1 when there
// is no such process here.
long process_uid(long pid) {
  struct stat st;
  return stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0 ? static_cast<long>(st.st_uid) : -1;
}

// Files root made are root's to vouch for; any other owner must be the
// process's own uid (a worker that dropped privileges after its socket or
// first dump was made as root keeps those root's).
bool owned_by(const struct stat& st, long uid) { return st.st_uid == 0 || uid < 0 || st.st_uid == static_cast<uid_t>(uid); }

// Whether the program a reply names is the process's: /proc/PID/exe names
// it (the same text, or the same file seen through the process's own root,
// for a container seen from outside); under qemu-user, whose exe is the
// emulator, the program must be mapped in the process.
bool program_is_process(long pid, const std::string& program) {
  const std::string proc = "/proc/" + std::to_string(pid);
  const std::string exe = process_exe(pid);
  if (exe.empty()) return false;
  if (exe == program) return true;
  struct stat a, b;
  if (program.empty() || program[0] != '/' || stat((proc + "/root" + program).c_str(), &b) != 0) return false;
  if (stat((proc + "/exe").c_str(), &a) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return true;
  if (base_of(exe).rfind("qemu-", 0) != 0) return false;
  std::ifstream maps(proc + "/maps");
  std::string line;
  // Each mapping: "START-END PERMS OFFSET MAJ:MIN INODE PATH". Bounded by
  // the kernel's own map count.
  for (size_t n = 0; n < (1u << 20) && std::getline(maps, line); ++n) {
    unsigned long long inode = 0;
    if (sscanf(line.c_str(), "%*s %*s %*s %*s %llu", &inode) == 1 && inode == b.st_ino && line.find(base_of(program)) != std::string::npos)
      return true;
  }
  return false;
}

// Why the file a reply names as the process's own is not ("" when it is):
// it must carry the process's pid in its name and lie in the output
// directory the reply names; where it is in `dir`, it must be a regular
// file of the process's uid or root.
std::string not_its_file(const std::string& path, long pid, const std::string& out, const std::string& dir, long uid,
                         bool* planted) {
  const std::string name = base_of(path);
  if (output_file_pid(name) != pid || (!out.empty() && dir_of(path) != out))
    return "names " + path + " as its own, which is not a file of process " + std::to_string(pid) + " in " +
           (out.empty() ? std::string("its output directory") : out);
  // Its files are where its socket is, or in its own subdirectory there
  // (a process that became a user who cannot write the directory).
  // (The reply names them as the process sees them: in a container, not
  // the path here. Only the subdirectory's name is taken from it.)
  const std::string own = "proc." + std::to_string(pid);
  const std::string in = !out.empty() && base_of(out) == own ? dir + "/" + own : dir;
  struct stat st;
  if (lstat((in + "/" + name).c_str(), &st) != 0) {
    if (errno == ENOENT) return "";  // rotated away meanwhile
    *planted = true;                 // cannot be checked: not shown
    return "names " + path + " as its own, which cannot be checked here (" + strerror(errno) + ")";
  }
  if (uid >= 0 && S_ISREG(st.st_mode) && owned_by(st, uid)) return "";
  *planted = true;
  return "names " + path + " as its own, but " + in + "/" + name + " is " +
         (S_ISREG(st.st_mode) ? "owned by uid " + std::to_string(st.st_uid) : std::string("not a regular file"));
}

// The files a reply names as the process's own snapshots, checked: a name
// of another process's is a lie (refused, said); a file under its name that
// another user planted in a shared directory is left out of the listing
// (the library lists by name), and is a lie as the snapshot just taken.
std::string foreign_snapshot(json& reply, long pid, const std::string& dir, long uid) {
  const std::string out = json_string_or(reply, "output_dir");
  for (const char* key : {"snapshot", "marks"}) {
    const std::string path = json_string_or(reply, key);
    bool planted = false;
    if (!path.empty())
      if (std::string why = not_its_file(path, pid, out, dir, uid, &planted); !why.empty()) return why;
  }
  auto it = reply.find("snapshots");
  if (it == reply.end() || !it->is_array()) return "";
  json kept = json::array();
  for (const auto& s : *it) {
    const std::string path = s.is_object() ? json_string_or(s, "path") : std::string();
    bool planted = false;
    std::string why = path.empty() ? "" : not_its_file(path, pid, out, dir, uid, &planted);
    if (!why.empty() && !planted) return why;
    if (why.empty()) kept.push_back(s);
  }
  if (kept.size() != it->size()) reply["not_its_own"] = it->size() - kept.size();
  *it = std::move(kept);
  return "";
}

// A reply is believed only where /proc and the directory agree with it.
std::string reply_lies(json& reply, long pid, const std::string& dir, long uid) {
  if (auto it = reply.find("pid"); it != reply.end() && (!it->is_number_integer() || it->get<long>() != pid))
    return "answered as pid " + it->dump() + ", not as " + std::to_string(pid);
  const std::string program = json_string_or(reply, "program");
  // Without ptrace access to another user's process (a container without
  // CAP_SYS_PTRACE asking a worker that dropped to nobody), /proc cannot
  // say what it runs: its word is kept, marked unchecked, since the kernel
  // has already said (SO_PEERCRED, its pidfd) that this is that process.
  if (!program.empty() && process_exe(pid).empty() && !process_ended(pid)) {
    reply["program_checked"] = false;
  } else if (!program.empty() && !program_is_process(pid, program)) {
    const std::string exe = process_exe(pid);
    return "names its program " + program + ", but process " + std::to_string(pid) +
           (exe.empty() ? std::string("'s program cannot be read in /proc") : " runs " + exe);
  }
  return foreign_snapshot(reply, pid, dir, uid);
}

// One ask in flight.
struct Conn {
  size_t index = 0;
  UniqueFd fd, path_fd;  // the connection; the socket's inode, held until connected
  bool connected = false;
  std::string reply;
  struct timespec made {};  // the socket file's ctime: when it was bound and named
  long uid = -1;            // the process's uid when it was connected to
};

// The pid a pidfd stands for now (/proc/self/fdinfo's "Pid:"): -1 when the
// process has ended, 0 when it cannot be read.
long pidfd_pid(int pidfd) {
  std::ifstream in("/proc/self/fdinfo/" + std::to_string(pidfd));
  std::string line;
  for (int n = 0; n < 64 && std::getline(in, line); ++n)
    if (line.rfind("Pid:", 0) == 0) return std::strtol(line.c_str() + 4, nullptr, 10);
  return 0;
}

// Types of the reply fields that are shown: a reply whose field has
// another type is not the library's (and would not be shown right).
std::string badly_typed(const json& r) {
  auto is = [&](const char* key, bool (json::*test)() const noexcept) {
    auto it = r.find(key);
    return it == r.end() || ((*it).*test)();
  };
  for (const char* k : {"ok", "recording", "wraps_past_2gib"})
    if (!is(k, &json::is_boolean)) return std::string("\"") + k + "\" is not true or false";
  for (const char* k : {"pid", "parent", "snapshot_every_ms", "snapshots_scheduled", "own_files", "own_bytes", "disk_bytes",
                        "max_bytes", "free_bytes", "min_free_bytes", "rotated", "mark", "mark_at_ms", "not_its_own"})
    if (!is(k, &json::is_number_unsigned) && !is(k, &json::is_number_integer)) return std::string("\"") + k + "\" is not a number";
  for (const char* k : {"program", "backend", "output_dir", "stopped_reason", "snapshot", "marks", "error", "forked_children",
                        "unreachable"})
    if (!is(k, &json::is_string)) return std::string("\"") + k + "\" is not a string";
  if (auto a = r.find("allocator"); a != r.end()) {
    if (!a->is_object()) return "\"allocator\" is not an object";
    for (const auto& [k, v] : a->items())
      if (!(k == "name" ? v.is_string() : v.is_number() || v.is_boolean())) return "\"allocator\" has a field of another type";
  }
  if (auto s = r.find("snapshots"); s != r.end()) {
    if (!s->is_array()) return "\"snapshots\" is not an array";
    for (const auto& e : *s)
      if (!e.is_object() || !e.contains("path") || !e["path"].is_string() ||
          (e.contains("bytes") && !e["bytes"].is_number()) || (e.contains("seq") && !e["seq"].is_number()))
        return "\"snapshots\" holds an entry that is not {path, bytes, seq}";
  }
  return "";
}

// The answer for what one connect(2) error means.
ControlAnswer connect_failure(const std::string& path, int err) {
  ControlAnswer a;
  a.outcome = Outcome::Unanswered;
  if (err == ECONNREFUSED) {
    a.outcome = Outcome::Stale;
    a.error = path + ": nobody answers: the process is gone (a stale socket)";
  } else if (err == ENOENT) {
    a.outcome = Outcome::Stale;
    a.error = path + ": gone: the process ended (its socket was removed)";
  } else if (err == EACCES) {
    a.error = path + ": permission denied: run as the profiled process's user (uid " + std::to_string(getuid()) +
              " cannot connect)";
  } else {
    a.error = path + ": cannot connect: " + strerror(err);
  }
  return a;
}

class Asker {
 public:
  Asker(const std::vector<ControlAsk>& asks, const std::string& request, double timeout)
      : asks_(asks), line_(request + "\n"), timeout_(timeout),
        // At most a day: a larger --timeout would overflow the deadline.
        deadline_(Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(std::clamp(timeout, 0.0, 86400.0) * 1000))),
        answers_(asks.size()) {}

  std::vector<ControlAnswer> run() {
    size_t next = 0;
    const size_t asked = std::min(asks_.size(), kMaxAskedProcesses);
    while (next < asked || !live_.empty()) {
      while (next < asked && live_.size() < kWindow) open(next++);
      if (live_.empty()) continue;
      if (Clock::now() >= deadline_) break;
      wait_and_read();
    }
    for (auto& c : live_)
      if (c.fd) unanswered(c.index, c.connected ? "no answer within " + seconds() + " (--timeout)"
                                                          : "no answer within " + seconds() +
                                                                ": the process is stopped or its control thread is busy (--timeout)");
    for (size_t i = next; i < asked; ++i) unanswered(i, "not asked: the command's --timeout ran out first");
    for (size_t i = asked; i < asks_.size(); ++i)
      unanswered(i, "not asked: a tree command asks at most " + std::to_string(kMaxAskedProcesses) + " processes");
    return std::move(answers_);
  }

 private:
  static constexpr size_t kWindow = 128;  // connections open at once

  std::string seconds() const { return std::to_string(static_cast<int>(timeout_)) + " s"; }

  void unanswered(size_t i, const std::string& why) {
    answers_[i].outcome = Outcome::Unanswered;
    answers_[i].error = asks_[i].socket + ": " + why;
  }
  void refuse(size_t i, const std::string& why) {
    answers_[i].outcome = Outcome::Refused;
    answers_[i].error = asks_[i].socket + ": " + why;
  }

  // The socket's own inode, never through a link, owned by the process's
  // uid or root; then a connection to that very inode.
  void open(size_t i) {
    const ControlAsk& a = asks_[i];
    Conn c;
    c.index = i;
    c.path_fd = UniqueFd(::open(a.socket.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    struct stat st;
    if (!c.path_fd || fstat(c.path_fd.get(), &st) != 0) {
      answers_[i] = connect_failure(a.socket, errno);
      return;
    }
    if (S_ISLNK(st.st_mode)) return refuse(i, "a link, not a socket: a control socket is never reached through a link");
    if (!S_ISSOCK(st.st_mode)) return refuse(i, "not a socket: not process " + std::to_string(a.pid) + "'s control socket");
    const long uid = process_uid(a.pid);
    c.made = st.st_ctim;
    c.uid = uid;
    if (!owned_by(st, uid))
      return refuse(i, "owned by uid " + std::to_string(st.st_uid) + ", not by process " + std::to_string(a.pid) +
                           "'s uid " + std::to_string(uid) + ": not its control socket");
    c.fd = UniqueFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!c.fd) {
      unanswered(i, std::string("socket: ") + strerror(errno));
      return;
    }
    live_.push_back(std::move(c));
    try_connect(live_.back());
  }

  // A full backlog (a stopped process, a busy control thread) is tried
  // again until the deadline, like a blocking connect with a timeout.
  bool try_connect(Conn& c) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/self/fd/%d", c.path_fd.get());
    if (connect(c.fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if (errno == EAGAIN || errno == EINTR) return false;
      answers_[c.index] = connect_failure(asks_[c.index].socket, errno);
      drop(c);
      return false;
    }
    c.connected = true;
    c.path_fd.reset();
    if (!peer_is(c)) {
      drop(c);
      return false;
    }
    // A peer the library refuses gets its refusal at once, before the
    // request is read: the request may then meet a closed socket (EPIPE,
    // never the signal), and the refusal is still there to read.
    ssize_t sent = send(c.fd.get(), line_.data(), line_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent != static_cast<ssize_t>(line_.size()) && !(sent < 0 && (errno == EPIPE || errno == ECONNRESET))) {
      unanswered(c.index, std::string("cannot send the request: ") + strerror(errno));
      drop(c);
    }
    return true;
  }

  // The kernel's word on who listens: the pid asked about, or nothing is
  // sent (not even the request: a socket under another's name never
  // learns what root wanted).
  bool peer_is(Conn& c) {
    const long pid = asks_[c.index].pid;
    struct ucred peer {};
    socklen_t len = sizeof peer;
    if (getsockopt(c.fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) {
      unanswered(c.index, std::string("SO_PEERCRED: ") + strerror(errno));
      return false;
    }
    if (peer.pid == 0) {
      refuse(c.index, "its server runs in another pid namespace, where memprofile cannot check that it is process " +
                          std::to_string(pid) + ": run memprofile in the service's pid namespace (kubectl exec into its container)");
      return false;
    }
    if (peer.pid != pid) {
      refuse(c.index, "served by process " + std::to_string(peer.pid) + " (uid " + std::to_string(peer.uid) +
                          "), not by process " + std::to_string(pid) + ": not its control socket");
      return false;
    }
    // SO_PEERCRED names who listened, alive or not: a listener whose process
    // ended (its fd kept by a child) under a pid now reused is not that
    // process. The peer's pidfd says whether it lives (Linux 6.5); else the
    // socket must not be older than the process (a second's slack for the
    // boot time's rounding).
    if (int pidfd = peer_pidfd(c.fd.get()); pidfd >= 0) {
      UniqueFd owned(pidfd);
      if (pidfd_pid(pidfd) == -1) {
        refuse(c.index, "its listener has ended and pid " + std::to_string(pid) +
                            " is another process now (a socket kept open by a child): not its control socket");
        return false;
      }
    } else if (double started = process_started(pid);
               started > 0 && static_cast<double>(c.made.tv_sec) + 1e-9 * static_cast<double>(c.made.tv_nsec) + 1 < started) {
      refuse(c.index, "made before process " + std::to_string(pid) + " started: another process's, under a reused pid");
      return false;
    }
    return true;
  }

  static int peer_pidfd(int fd) {
#ifndef SO_PEERPIDFD
    constexpr int SO_PEERPIDFD = 77;  // Linux 6.5; older kernels refuse it (ENOPROTOOPT)
#endif
    int pidfd = -1;
    socklen_t len = sizeof pidfd;
    return getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 ? pidfd : -1;
  }

  void drop(Conn& c) { c.fd.reset(); }

  void wait_and_read() {
    live_.erase(std::remove_if(live_.begin(), live_.end(), [](const Conn& c) { return !c.fd; }), live_.end());
    if (live_.empty()) return;
    std::vector<pollfd> fds;
    bool connecting = false;
    for (auto& c : live_) {
      if (!c.connected) connecting = true;
      fds.push_back({c.connected ? c.fd.get() : -1, POLLIN, 0});
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    int wait = static_cast<int>(std::clamp<int64_t>(connecting ? std::min<int64_t>(left, 10) : left, 0, 1 << 30));
    int n = poll(fds.data(), fds.size(), wait);
    for (size_t k = 0; k < live_.size(); ++k) {
      Conn& c = live_[k];
      if (!c.connected) {
        try_connect(c);
      } else if (n > 0 && fds[k].revents) {
        read_some(c);
      }
    }
    live_.erase(std::remove_if(live_.begin(), live_.end(), [](const Conn& c) { return !c.fd; }), live_.end());
  }

  // One line is the whole answer: a child forked meanwhile may hold the
  // connection open after the process closed it.
  void read_some(Conn& c) {
    char buf[16384];
    ssize_t got = read(c.fd.get(), buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (got > 0) c.reply.append(buf, static_cast<size_t>(got));
    if (got > 0 && c.reply.find('\n') == std::string::npos && c.reply.size() < kMaxReplyBytes) return;
    finish(c);
    drop(c);
  }

  void finish(Conn& c) {
    const ControlAsk& a = asks_[c.index];
    if (c.reply.empty()) return unanswered(c.index, "the process closed the connection without answering");
    replies_bytes_ += c.reply.size();
    if (c.reply.find('\n') == std::string::npos && c.reply.size() >= kMaxReplyBytes)
      return refuse(c.index, "an answer longer than " + std::to_string(kMaxReplyBytes >> 20) + " MiB: not a control reply");
    if (replies_bytes_ > kMaxRepliesBytes)
      return refuse(c.index, "not read: the tree's answers passed " + std::to_string(kMaxRepliesBytes >> 20) + " MiB");
    if (size_t nl = c.reply.find('\n'); nl != std::string::npos) c.reply.resize(nl);
    json j;
    size_t values = 0;
    try {
      j = parse_json_bounded(c.reply, a.socket, std::min(kMaxReplyValues, kMaxRepliesValues - values_), &values);
    } catch (const Error& e) {
      return refuse(c.index, std::string("its answer is not a control reply: ") + e.what());
    }
    values_ += values;
    // Every answer but the library's bare refusal of a peer says its pid.
    if (!j.is_object() || !j.contains("ok") || (j["ok"] == true && !j.contains("pid")))
      return refuse(c.index, "the answer is not a control reply");
    if (std::string bad = badly_typed(j); !bad.empty()) return refuse(c.index, "the answer is not a control reply: " + bad);
    if (std::string lie = reply_lies(j, a.pid, dir_of(a.socket), c.uid); !lie.empty())
      return refuse(c.index, lie);
    answers_[c.index].outcome = Outcome::Answered;
    answers_[c.index].reply = std::move(j);
  }

  const std::vector<ControlAsk>& asks_;
  const std::string line_;
  const double timeout_;
  const Clock::time_point deadline_;
  std::vector<ControlAnswer> answers_;
  std::vector<Conn> live_;
  size_t replies_bytes_ = 0, values_ = 0;
};

}  // namespace

std::vector<ControlAnswer> ask_controls(const std::vector<ControlAsk>& asks, const std::string& request, double timeout) {
  return Asker(asks, request, timeout).run();
}

json ask_control(const std::string& path, long pid, const std::string& request, double timeout) {
  ControlAnswer a = ask_controls({ControlAsk{pid, path}}, request, timeout).front();
  if (a.outcome == Outcome::Answered) return std::move(a.reply);
  // The error names the socket already: a FileError with it as the file
  // would say it twice.
  std::string why = a.error.substr(std::min(a.error.size(), path.size() + 2));
  if (a.outcome == Outcome::Stale) throw StaleSocket(path, why);
  throw FileError(path, why);
}

// The process's own environment as exec'd (/proc/PID/environ: unsetenv in
// the process does not change it), bounded like the kernel's ARG_MAX.
std::map<std::string, std::string> process_environ(const std::string& proc) {
  std::map<std::string, std::string> env;
  std::ifstream in(proc + "/environ", std::ios::binary);
  std::string entry;
  size_t total = 0;
  while (total < (4u << 20) && std::getline(in, entry, '\0')) {
    total += entry.size() + 1;
    size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

}  // namespace memprofile
