#include "serve/beside.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "base/error.h"
#include "runtime/tree_control.h"
#include "serve/serve.h"

namespace memprofile {

namespace {

// What the serve child leaves of the launcher's process: no fd but 0-2
// (a listener or a readiness pipe of the program's parent must close when
// the program closes it), stdin from /dev/null, its own session (a
// terminal's or the program's kill(0, ...) does not reach it), the
// signals a program sends its group ignored, the first to go on OOM, and a
// name of its own (tree_control.cpp leaves it out of the tree).
void become_serve_child() {
  if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
    for (int fd = 3; fd < 65536; ++fd) close(fd);
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, 0);
    if (null != 0) close(null);
  }
  setsid();
  for (int sig : {SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE}) signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  std::ofstream("/proc/self/oom_score_adj") << "1000\n";
  prctl(PR_SET_NAME, kServeChildName);
}

}  // namespace

// --serve: `memprofile serve` for the tree, in a child forked now, before
// this process becomes the program: it ends with it (PR_SET_PDEATHSIG), and
// is not a member of the tree it serves (tree_control.h). A setting that
// cannot serve is said in one line, and the program runs without it:
// serving never keeps the service from starting.
void serve_beside(const LauncherConfig& cfg, const std::string& ctl_problem, EventLog& log) {
  ServeOptions so;
  so.listen = cfg.serve;
  so.token_file = cfg.serve_token_file;
  so.target.pid = getpid();
  so.target.pid_given = true;
  so.target.output_dir = cfg.output_dir;
  so.target.timeout = 5;
  so.child_of_target = true;
  try {
    if (!ctl_problem.empty()) throw Error("no control library: " + ctl_problem);
    check_serve_options(so);
  } catch (const std::exception& e) {
    log.error("serve_refused", "--serve " + cfg.serve + ": not serving: " + e.what(), {{"listen", cfg.serve}});
    return;
  }
  const pid_t app = getpid();
  std::cout.flush();
  std::cerr.flush();
  pid_t child = fork();
  if (child != 0) {
    if (child < 0) log.error("serve_refused", std::string("--serve: cannot fork: ") + std::strerror(errno), {});
    return;
  }
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != app) _exit(0);  // the program ended before this could ask to end with it
  become_serve_child();
  try {
    run_serve(so);
  } catch (const std::exception& e) {
    std::cerr << "memprofile serve: " << e.what() << std::endl;
  }
  // Exit 0 whatever happened: a program that reaps children it does not know
  // (PostgreSQL's postmaster) takes another status for a crash of its own.
  _exit(0);
}


}  // namespace memprofile
