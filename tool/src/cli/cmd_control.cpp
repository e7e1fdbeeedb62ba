// `memprofile start|stop|snapshot|status [PID]`: drive a process that
// `memprofile exec` started, without restarting it, through the control
// library's socket in the output directory (ctl/ctl.h). Run in the pod with
// kubectl exec; PID 1 is the application when exec is the entrypoint.
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

#include "base/error.h"
#include "base/json_text.h"
#include "base/unique_fd.h"
#include "cli/cmd_launcher.h"
#include "verdict/profiler.h"

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

// The socket for the pid asked for. Without a PID, when 1 has none (a
// dispatcher's child is the profiled process), the only one there is.
std::pair<std::string, long> find_socket(const ControlOptions& o, const std::string& dir) {
  std::string path = dir + "/" + ctl_socket_name(o.pid);
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    // In a shared directory, a socket of that name owned by someone else
    // is not the process's.
    struct stat proc;
    if (S_ISSOCK(st.st_mode) && stat(("/proc/" + std::to_string(o.pid)).c_str(), &proc) == 0 &&
        st.st_uid != proc.st_uid && st.st_uid != 0)
      throw FileError(path, "owned by uid " + std::to_string(st.st_uid) + ", not by process " + std::to_string(o.pid) +
                                "'s uid " + std::to_string(proc.st_uid) + ": not its control socket");
    return {path, o.pid};
  }
  auto pids = socket_pids(dir);
  if (!o.pid_given && pids.size() == 1) {
    std::cerr << "memprofile: process 1 has no control socket; using process " << pids[0] << "'s\n";
    return {dir + "/" + ctl_socket_name(pids[0]), pids[0]};
  }
  std::string others;
  for (long p : pids) others += (others.empty() ? "" : ", ") + std::to_string(p);
  throw FileError(path, "no control socket: process " + std::to_string(o.pid) +
                            " was not started by memprofile exec with the control library" +
                            (others.empty() ? std::string(" (none in " + dir + ")")
                                            : " (sockets for: " + others + "; give that PID)"));
}

}  // namespace

// One request, one JSON reply, within the timeout.
json ask_control(const std::string& path, const std::string& request, double timeout) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw Error(std::string("socket: ") + strerror(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // A path longer than sun_path is reached through its directory's fd, the
  // way the control library bound it (ctl.c, bind_at).
  UniqueFd dir;
  std::string address = path;
  if (path.size() >= sizeof addr.sun_path) {
    std::string parent = path.substr(0, path.rfind('/'));
    dir = UniqueFd(open(parent.empty() ? "/" : parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir) throw FileError(parent, std::string("cannot open: ") + strerror(errno));
    address = "/proc/self/fd/" + std::to_string(dir.get()) + path.substr(path.rfind('/'));
    if (address.size() >= sizeof addr.sun_path) throw FileError(path, "too long for a unix socket path");
  }
  memcpy(addr.sun_path, address.c_str(), address.size() + 1);
  // A full backlog (the process stopped, or its control thread busy) must
  // not block forever: Linux bounds a unix connect by the send timeout.
  timeval tv{static_cast<time_t>(timeout), static_cast<suseconds_t>((timeout - static_cast<double>(static_cast<time_t>(timeout))) * 1e6)};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    if (err == ECONNREFUSED) throw FileError(path, "nobody answers: the process is gone (a stale socket)");
    if (err == EAGAIN || err == EINPROGRESS || err == ETIMEDOUT)
      throw FileError(path, "no answer within " + std::to_string(static_cast<int>(timeout)) +
                                " s: the process is stopped or its control thread is busy (--timeout)");
    if (err == EACCES)
      throw FileError(path, "permission denied: run as the profiled process's user (uid " +
                                std::to_string(getuid()) + " cannot connect)");
    throw FileError(path, std::string("cannot connect: ") + strerror(err));
  }
  std::string line = request + "\n";
  if (write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    throw FileError(path, std::string("cannot send the request: ") + strerror(errno));
  std::string reply;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  char buf[4096];
  // One line is the whole answer: a child forked meanwhile may hold the
  // connection open after the process closed it.
  while (reply.size() < (1u << 20) && reply.find('\n') == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd.get(), POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) == 0)
      throw FileError(path, "no answer within " + std::to_string(static_cast<int>(timeout)) + " s (--timeout)");
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  if (reply.empty()) throw FileError(path, "the process closed the connection without answering");
  json j = parse_json_bounded(reply, path);
  if (!j.is_object() || !j.contains("ok")) throw FileError(path, "the answer is not a control reply");
  return j;
}

namespace {

void print_status(const json& r) {
  auto str = [&](const char* k) { return r.value(k, std::string()); };
  auto num = [&](const char* k) { return r.value(k, uint64_t{0}); };
  std::cout << "pid " << r.value("pid", 0) << ": " << str("backend") << ", recording "
            << (r.value("recording", false) ? "on" : "off");
  if (!str("stopped_reason").empty()) std::cout << " (stopped: " << str("stopped_reason") << ")";
  std::cout << "\n";
  json snaps = r.value("snapshots", json::array());
  std::vector<json> list(snaps.begin(), snaps.end());
  std::sort(list.begin(), list.end(),
            [](const json& a, const json& b) { return a.value("seq", uint64_t{0}) < b.value("seq", uint64_t{0}); });
  std::cout << "profiles: " << r.value("own_files", static_cast<unsigned>(list.size())) << " of this process, " << mib(num("own_bytes")) << "; "
            << mib(num("disk_bytes")) << " in " << str("output_dir") << " of a "
            << (num("max_bytes") ? mib(num("max_bytes")) : std::string("unlimited")) << " budget; "
            << mib(num("free_bytes")) << " free (floor " << mib(num("min_free_bytes")) << ")\n";
  if (list.size() < r.value("own_files", 0u)) std::cout << "  (the " << list.size() << " listed; all are in " << str("output_dir") << ")\n";
  for (const auto& s : list)
    std::cout << "  " << s.value("path", std::string()) << "  " << mib(s.value("bytes", uint64_t{0})) << "\n";
}

ExitCode run_control(const ControlOptions& o) {
  if (o.pid <= 0) throw Error("memprofile " + o.action + ": PID must be a positive number");
  std::string dir = control_dir(o);
  auto [path, pid] = find_socket(o, dir);
  json r = ask_control(path, o.action, o.timeout);
  bool ok = r.value("ok", false);
  if (o.json) {
    std::cout << json_text(r) << "\n";
  } else if (!ok) {
    std::cerr << "memprofile: " << o.action << " " << pid << ": " << r.value("error", std::string("failed")) << "\n";
  } else if (o.action == "snapshot") {
    std::cout << r.value("snapshot", std::string()) << "\n";
  } else if (o.action == "status") {
    print_status(r);
  } else {
    std::cout << "pid " << pid << ": " << r.value("backend", std::string()) << ", recording "
              << (r.value("recording", false) ? "on" : "off") << "\n";
  }
  return ok ? ExitCode::Ok : ExitCode::NotProfilable;
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
           Action{"snapshot", "Write a heap profile of a running process now and print its path (jemalloc)"},
           Action{"status", "Say whether a process is recording, its snapshots and the disk they use"},
       }) {
    auto o = std::make_shared<ControlOptions>();
    o->action = a.name;
    CLI::App* cmd = app.add_subcommand(a.name, a.help);
    cmd->add_option("pid", o->pid, "the process (default 1, the container's entrypoint)")
        ->each([o](const std::string&) { o->pid_given = true; });
    cmd->add_option("--output-dir", o->output_dir,
                    "where its control socket is (default: what exec told the process, else the config's)");
    cmd->add_option("--config", o->config, "launcher config file")->capture_default_str();
    cmd->add_option("--timeout", o->timeout, "seconds to wait for the answer")->capture_default_str();
    cmd->add_flag("--json", o->json, "print the process's answer as JSON");
    cmd->callback([o, &exit_code] { exit_code = run_control(*o); });
  }
}

}  // namespace memprofile
