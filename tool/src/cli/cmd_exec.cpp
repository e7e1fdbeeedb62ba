// `memprofile exec [options] -- PROGRAM [ARGS...]`: the image's entrypoint.
// Checks that the profiler can attach and record, then becomes PROGRAM with
// execve (no wrapper stays: PID 1 is the application, signals and exit code
// are its own). LD_PRELOAD and the backend's settings go into PROGRAM's
// environment only, never the image's, so `kubectl exec`/`kubectl cp`
// processes are not injected. A failed check never takes the service down
// unless --strict: the program runs unprofiled with one ERROR line.
#include <deque>
#include <memory>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/logger.h"
#include "launch/launch.h"
#include "serve/beside.h"

namespace memprofile {

void setup_exec(CLI::App& app) {
  // For --help only: exec's command line belongs to the program it starts,
  // so run_exec_command_line reads it with the launcher model before CLI11
  // sees it (the same reading preflight gives an image's entrypoint).
  struct HelpOnly {
    std::deque<std::string> values;  // CLI11 keeps a reference to each
    std::vector<std::string> command;
  };
  auto help = std::make_shared<HelpOnly>();
  CLI::App* cmd = app.add_subcommand(
      "exec", "Check that the profiler will attach and record, then become PROGRAM with LD_PRELOAD set for it alone");
  for (const auto& spec : exec_option_specs()) {
    if (spec.value)
      cmd->add_option(spec.name, help->values.emplace_back(), spec.help)->type_name(spec.value);
    else
      cmd->add_flag(spec.name, spec.help);
  }
  cmd->add_option("command", help->command, "-- PROGRAM [ARGS...]");
  cmd->callback([help] {
    throw Error("memprofile exec: give memprofile's own options (-v) before exec, as in memprofile -v exec [options] -- "
                "PROGRAM [ARGS...]");
  });
}

std::optional<ExitCode> run_exec_command_line(const std::vector<std::string>& argv) {
  size_t at = exec_subcommand_index(argv);
  if (!at) return std::nullopt;
  ExecArgs args = parse_exec_args({argv.begin() + static_cast<std::ptrdiff_t>(at) + 1, argv.end()});
  if (args.help) return std::nullopt;  // CLI11 prints exec's help
  Logger log(args.log_format);
  return launch(args, log, serve_beside);
}

}  // namespace memprofile
