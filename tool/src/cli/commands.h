// The subcommands, one file each (cmd_NAME.cpp): setup_NAME declares its
// options on the app and a callback that runs it. main.cpp calls each once.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"

namespace memprofile {

// Judging, before anything runs.
void setup_check(CLI::App& app, ExitCode& exit_code);      // ELF files or a root
void setup_preflight(CLI::App& app, ExitCode& exit_code);  // an image

// In the container, from the static binary: an LD_PRELOAD in the pod's
// environment never loads into it. exec's command line belongs to the
// program it starts: CLI11 only shows its --help. run_exec_command_line runs
// `memprofile [-v] exec ...` (the whole argv), read by the launcher model
// (runtime/launcher.h) as preflight reads an image's entrypoint; nullopt
// when argv is not that, or asks for help.
void setup_exec(CLI::App& app);
std::optional<ExitCode> run_exec_command_line(const std::vector<std::string>& argv);
void setup_attached(CLI::App& app, ExitCode& exit_code);
void setup_collect(CLI::App& app, ExitCode& exit_code);
void setup_image_setup(CLI::App& app, ExitCode& exit_code);
// start, stop, snapshot, status: the running processes' control library.
void setup_control(CLI::App& app, ExitCode& exit_code);

// After the run, where the profiles are looked at (cmd_report.cpp).
void setup_report(CLI::App& app, ExitCode& exit_code);
// The tree's heap and memory over HTTP, beside it in the pod (cmd_serve.cpp).
void setup_serve(CLI::App& app, ExitCode& exit_code);

}  // namespace memprofile
