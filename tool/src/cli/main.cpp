// memprofile: make container images profilable with LD_PRELOAD heap profilers.
// One subcommand per file (cmd_*.cpp); errors travel as exceptions to the one
// catch here, which prints "memprofile: <message>" and exits 2.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/memory_ceiling.h"
#include "base/terminal.h"
#include "cli/commands.h"
#include "cli/logger.h"

#ifndef MEMPROFILE_VERSION
#define MEMPROFILE_VERSION "0.0.0-dev"
#endif

int main(int argc, char** argv) {
  using namespace memprofile;
  // Every text output: no control character from an untrusted name reaches
  // the terminal raw (base/terminal.h).
  escape_terminal_output();
  CLI::App app{"memprofile: make container images profilable with LD_PRELOAD heap profilers"};
  app.set_version_flag("--version", MEMPROFILE_VERSION);
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "log debug details to stderr");
  ExitCode exit_code = ExitCode::Ok;
  setup_check(app, exit_code);
  setup_preflight(app, exit_code);
  setup_exec(app);
  setup_attached(app, exit_code);
  setup_collect(app, exit_code);
  setup_image_setup(app, exit_code);
  setup_control(app, exit_code);
  setup_report(app, exit_code);
  setup_serve(app, exit_code);

  start_text_log();
  // Reading profiles is bounded by what the process holds, in every
  // command that reads them (status reads the newest dump); report and
  // serve set their own (--max-memory).
  set_memory_ceiling(kReportMemoryCeiling, "report --max-memory");
  app.parse_complete_callback([&] { set_log_verbose(verbose); });

  try {
    std::vector<std::string> args(argv, argv + argc);
    if (auto code = run_exec_command_line(args)) return to_int(*code);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return to_int(rc == 0 ? ExitCode::Ok : ExitCode::InputError);
  } catch (const Error& e) {
    std::cerr << "memprofile: " << e.what() << "\n";
    return to_int(ExitCode::InputError);
  } catch (const std::bad_alloc&) {
    std::cerr << "memprofile: out of memory\n";
    return to_int(ExitCode::InputError);
  } catch (const std::exception& e) {
    std::cerr << "memprofile: internal error: " << e.what() << "\n";
    return to_int(ExitCode::InputError);
  }
  return to_int(exit_code);
}
