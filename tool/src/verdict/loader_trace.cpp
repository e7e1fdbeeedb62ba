#include "verdict/loader_trace.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>

#include "base/error.h"
#include "base/unique_fd.h"
#include "verdict/findings.h"

namespace memprofile {

namespace {

// Runs `argv` with `env`, stdin from /dev/null, stdout and stderr into one
// pipe, in a process group of its own; its output (the last MiB: what
// says why comes last) and its wait status. The group gets a CPU-time limit
// and, for a child that sleeps or blocks (a sitecustomize waiting on a
// network an offline build has not), a generous wall-clock cap: a build
// step must end. *timed_out says the cap was hit and the group killed.
std::string run_captured(std::vector<std::string> argv, std::vector<std::string> env, int* status, bool* timed_out) {
  constexpr int kCapSeconds = 600;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("--trace-loader: pipe: ") + strerror(errno));
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  std::vector<char*> envp, args;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw Error(std::string("--trace-loader: fork: ") + strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(write_end.get(), STDOUT_FILENO);
    dup2(write_end.get(), STDERR_FILENO);
    struct rlimit cpu = {120, 120};
    setrlimit(RLIMIT_CPU, &cpu);
    execve(args[0], args.data(), envp.data());
    std::string why = std::string("memprofile: cannot run ") + args[0] + ": " + strerror(errno) + "\n";
    ssize_t ignored = write(STDERR_FILENO, why.data(), why.size());
    (void)ignored;
    _exit(to_int(ExitCode::NotFound));
  }
  setpgid(pid, pid);  // also here: whichever runs first
  write_end.reset();
  std::string out;
  char buf[4096];
  *timed_out = false;
  // Whether the child has ended, leaving it unreaped.
  auto exited = [pid] {
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kCapSeconds);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      *timed_out = true;
      break;
    }
    struct pollfd p = {read_end.get(), POLLIN, 0};
    int ready = poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      // The child gone (not yet reaped) while something it started still
      // holds the pipe: its output is all there is.
      if (exited()) break;
      continue;
    }
    if (ready < 0) break;
    ssize_t n = read(read_end.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of output: every holder of the pipe is gone
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (2u << 20)) out.erase(0, out.size() - (1u << 20));
  }
  // The child's end (it may close its output before it exits), within the
  // same cap; then the group, whatever the child left behind, killed before
  // the child is reaped: until then its pid, the group's id, names no other.
  while (!*timed_out && !exited()) {
    if (std::chrono::steady_clock::now() >= deadline) *timed_out = true;
    else poll(nullptr, 0, 100);
  }
  kill(-pid, SIGKILL);
  read_end.reset();
  *status = 0;
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
  return out;
}

std::string last_line(const std::string& out) {
  std::string text = out.substr(0, out.find_last_not_of('\n') + 1);
  return text.empty() ? "no output" : text.substr(text.rfind('\n') + 1);
}

std::string real_path(const std::string& path) {
  char real[PATH_MAX];
  return realpath(path.c_str(), real) ? real : path;
}

}  // namespace

void trace_loader(PreflightResult& r) {
  if (!r.target || r.preload.empty()) return;
  std::string path = r.target->path;
  int status = 0;
  bool timed_out = false;
  std::string out = run_captured({path}, {"LD_TRACE_LOADED_OBJECTS=1", "LD_PRELOAD=" + r.preload, "PATH=/usr/bin:/bin"},
                                 &status, &timed_out);
  std::string want = real_path(r.preload);
  bool mapped = false;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ws(line);
    std::string first, arrow, third;
    ws >> first >> arrow >> third;
    std::string lib = arrow == "=>" ? third : first;
    if (lib == r.preload || lib == want || real_path(lib) == want) mapped = true;
  }
  if (!mapped || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string first_line = out.substr(0, out.find('\n'));
    r.findings.insert(r.findings.begin(),
                      make_finding("PRELOAD_NOT_LOADED", "the image's loader, run on " + path + " with LD_PRELOAD=" +
                                                            r.preload + " in trace mode, did not map it (" +
                                                            (first_line.empty() ? "no output" : first_line) + ")"));
  } else {
    r.findings.push_back(make_finding("LOADER_TRACED", "the image's loader maps " + r.preload + " into " + path));
  }
}

void trace_import(PreflightResult& r) {
  if (!r.python || r.preload.empty()) return;
  // What the interpreter imported, on a line of its own: an app's
  // sitecustomize may print too.
  const std::string mark = "memprofile-imported ";
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  int status = 0;
  bool timed_out = false;
  std::string out = run_captured({r.python->invoked, "-c",
                                  "import sys, memray._memray as m; sys.stdout.write('\\n" + mark + "' + m.__file__ + '\\n')"},
                                 env, &status, &timed_out);
  std::string imported;
  if (size_t at = out.rfind("\n" + mark); at != std::string::npos) {
    imported = out.substr(at + 1 + mark.size());
    imported = imported.substr(0, imported.find('\n'));
  }
  const std::string who = r.python->invoked;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !imported.empty() && real_path(imported) == real_path(r.preload)) {
    r.findings.push_back(make_finding("MEMRAY_IMPORTED", "the image's " + who + " imports " + imported));
    return;
  }
  std::string why;
  if (timed_out) {
    why = "it had not ended after 600 s and was killed (" + last_line(out) + ")";
  } else if (!imported.empty() && real_path(imported) == real_path(r.preload)) {
    why = "it imported it, then exited with " +
          (WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                             : std::string("signal ") + strsignal(WTERMSIG(status)));
  } else if (!imported.empty()) {
    why = "it imported " + imported + ", not " + r.preload;
  } else {
    // Python's last line says why (an ImportError, a missing library).
    why = last_line(out);
    if (WIFSIGNALED(status)) why += std::string(" (killed by ") + strsignal(WTERMSIG(status)) + ")";
  }
  r.findings.insert(r.findings.begin(),
                    make_finding("MEMRAY_NOT_IMPORTED", "the image's " + who + " did not import memray's extension " +
                                                            r.preload + ": " + why));
}

}  // namespace memprofile
