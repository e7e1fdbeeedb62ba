// The static binary's serve, until it links profile/'s symboliser: it says
// in one line where to run it.
#include "cli/commands.h"

namespace memprofile {

void setup_serve(CLI::App& app, ExitCode&) {
  CLI::App* cmd = app.add_subcommand("serve", "Not in this binary: run serve with the dynamically linked memprofile");
  cmd->allow_extras();
  cmd->callback([] {
    throw Error("serve is not in this memprofile (the static binary that goes into images); run the dynamically "
                "linked memprofile serve beside the tree");
  });
}

}  // namespace memprofile
