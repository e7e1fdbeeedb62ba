// `memprofile start|stop|snapshot|status [PID] [--only]`: drive the processes
// that `memprofile exec` started, without restarting them, through the
// control library's sockets in the output directory (ctl/ctl.h). Run in the
// pod with kubectl exec; PID 1 is the application when exec is the
// entrypoint. A service is a tree of processes (prefork workers, a backend
// per connection): the command acts on PID and every descendant that serves
// a socket (runtime/tree_control.h), and names in one line each descendant
// it cannot reach and why.
#include <iostream>
#include <memory>

#include "base/error.h"
#include "base/json_text.h"
#include "cli/commands.h"
#include "profile/profile_in_use.h"
#include "runtime/backend.h"
#include "runtime/tree_control.h"
#include "runtime/tree_text.h"

namespace memprofile {

namespace {

ExitCode run_control(const ControlRequest& o) {
  if (o.pid <= 0) throw Error("memprofile " + o.action + ": PID must be a positive number");
  TreeAnswer t = ask_tree(o, profile_in_use);
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
    auto o = std::make_shared<ControlRequest>();
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

