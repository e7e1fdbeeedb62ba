#include "verdict/loader_trace.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "base/error.h"
#include "base/unique_fd.h"
#include "verdict/findings.h"

namespace memprofile {

void trace_loader(PreflightResult& r) {
  if (!r.target || r.preload.empty()) return;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("--trace-loader: pipe: ") + strerror(errno));
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  std::vector<std::string> env_strings = {"LD_TRACE_LOADED_OBJECTS=1", "LD_PRELOAD=" + r.preload, "PATH=/usr/bin:/bin"};
  std::vector<char*> env;
  for (auto& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  std::string path = r.target->path;
  char* argv[] = {path.data(), nullptr};
  pid_t pid = fork();
  if (pid < 0) throw Error(std::string("--trace-loader: fork: ") + strerror(errno));
  if (pid == 0) {
    dup2(write_end.get(), STDOUT_FILENO);
    dup2(write_end.get(), STDERR_FILENO);
    execve(path.c_str(), argv, env.data());
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
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  char real[PATH_MAX];
  std::string want = realpath(r.preload.c_str(), real) ? real : r.preload;
  bool mapped = false;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ws(line);
    std::string first, arrow, third;
    ws >> first >> arrow >> third;
    std::string lib = arrow == "=>" ? third : first;
    char rl[PATH_MAX];
    if (lib == r.preload || lib == want || (realpath(lib.c_str(), rl) && want == rl)) mapped = true;
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

}  // namespace memprofile
