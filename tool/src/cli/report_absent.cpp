// The static binary's report: it runs in the pod, where there is no libdw
// or libiberty to symbolise with, so it says in one line where to run it.
#include "cli/commands.h"

namespace memprofile {

void setup_report(CLI::App& app, ExitCode&) {
  CLI::App* cmd = app.add_subcommand("report", "Not in this binary: run report where the profiles are looked at");
  cmd->allow_extras();
  cmd->callback([] {
    throw Error("report is not in this memprofile (the static binary that goes into images); copy the profiles out "
                "(memprofile collect) and run report with the dynamically linked memprofile");
  });
}

}  // namespace memprofile
