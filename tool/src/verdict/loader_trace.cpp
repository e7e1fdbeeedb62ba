#include "verdict/loader_trace.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "base/error.h"
#include "base/unique_fd.h"
#include "verdict/findings.h"

namespace memprofile {

namespace {

// Runs `argv` with `env`, stdout and stderr into one pipe; its output (the
// first MiB) and its wait status. The child gets a CPU-time limit, so a
// program that spins cannot hold the build step for ever.
std::string run_captured(std::vector<std::string> argv, std::vector<std::string> env, int* status) {
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
    dup2(write_end.get(), STDOUT_FILENO);
    dup2(write_end.get(), STDERR_FILENO);
    struct rlimit cpu = {120, 120};
    setrlimit(RLIMIT_CPU, &cpu);
    execve(args[0], args.data(), envp.data());
    _exit(to_int(ExitCode::NotFound));
  }
  write_end.reset();
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(read_end.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (out.size() < (1u << 20)) out.append(buf, static_cast<size_t>(n));
  }
  read_end.reset();
  *status = 0;
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
  return out;
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
  std::string out =
      run_captured({path}, {"LD_TRACE_LOADED_OBJECTS=1", "LD_PRELOAD=" + r.preload, "PATH=/usr/bin:/bin"}, &status);
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
  std::string out = run_captured({r.python->invoked, "-c",
                                  "import sys, memray._memray as m; sys.stdout.write('\\n" + mark + "' + m.__file__ + '\\n')"},
                                 env, &status);
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
  if (!imported.empty()) {
    why = "it imported " + imported + ", not " + r.preload;
  } else {
    // Python's last line says why (an ImportError, a missing library).
    std::string text = out.substr(0, out.find_last_not_of('\n') + 1);
    why = text.empty() ? "no output" : text.substr(text.rfind('\n') + 1);
    if (WIFSIGNALED(status)) why += std::string(" (killed by ") + strsignal(WTERMSIG(status)) + ")";
  }
  r.findings.insert(r.findings.begin(),
                    make_finding("MEMRAY_NOT_IMPORTED", "the image's " + who + " did not import memray's extension " +
                                                            r.preload + ": " + why));
}

}  // namespace memprofile
