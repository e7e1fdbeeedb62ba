#include "runtime/control_client.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "base/error.h"
#include "base/json_text.h"
#include "base/unique_fd.h"
#include "runtime/backend.h"

namespace memprofile {

using nlohmann::json;

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
    if (err == ECONNREFUSED) throw StaleSocket(path, "nobody answers: the process is gone (a stale socket)");
    if (err == ENOENT) throw StaleSocket(path, "gone: the process ended (its socket was removed)");
    if (err == EAGAIN || err == EINPROGRESS || err == ETIMEDOUT)
      throw FileError(path, "no answer within " + std::to_string(static_cast<int>(timeout)) +
                                " s: the process is stopped or its control thread is busy (--timeout)");
    if (err == EACCES)
      throw FileError(path, "permission denied: run as the profiled process's user (uid " +
                                std::to_string(getuid()) + " cannot connect)");
    throw FileError(path, std::string("cannot connect: ") + strerror(err));
  }
  // A peer the library refuses gets its refusal at once, before the request
  // is read: the request may then meet a closed socket (EPIPE, never the
  // signal), and the refusal is still there to read.
  std::string line = request + "\n";
  ssize_t sent = send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL);
  if (sent != static_cast<ssize_t>(line.size()) && !(sent < 0 && (errno == EPIPE || errno == ECONNRESET)))
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
