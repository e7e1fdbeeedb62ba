// The in-container commands: `exec` (the verified entrypoint), `attached`
// and `collect` (run with kubectl exec). The binary is static, so an
// LD_PRELOAD in the pod's environment never loads into them.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"

namespace memprofile {

// exec's command line belongs to the program it starts: CLI11 only shows
// its --help. run_exec_command_line runs `memprofile [-v] exec ...` (the
// whole argv), read by the launcher model (verdict/launcher.h) as preflight
// reads an image's entrypoint; nullopt when argv is not that, or asks for help.
void setup_exec(CLI::App& app);
std::optional<ExitCode> run_exec_command_line(const std::vector<std::string>& argv);
void setup_attached(CLI::App& app, ExitCode& exit_code);
void setup_collect(CLI::App& app, ExitCode& exit_code);
void setup_image_setup(CLI::App& app, ExitCode& exit_code);
// start, stop, snapshot, status: the running process's control library.
void setup_control(CLI::App& app, ExitCode& exit_code);
// One request to a control socket (ctl/ctl.h) and its JSON answer; throws
// FileError naming the socket when nobody answers within `timeout` seconds.
nlohmann::json ask_control(const std::string& socket, const std::string& request, double timeout);

// A process's environment as exec'd (`proc` is /proc/PID; unsetenv in the
// process does not change it), bounded like the kernel's ARG_MAX.
std::map<std::string, std::string> process_environ(const std::string& proc);

// One structured line per event on stderr: text ("memprofile: info: ...")
// or JSON ({"level":...,"event":...,"msg":...,<fields>}).
class Logger {
 public:
  explicit Logger(const std::string& format);
  void info(const std::string& event, const std::string& msg, const nlohmann::json& fields);
  void warn(const std::string& event, const std::string& msg, const nlohmann::json& fields);
  void error(const std::string& event, const std::string& msg, const nlohmann::json& fields);

 private:
  void emit(const char* level, const std::string& event, const std::string& msg, const nlohmann::json& fields);
  bool json_;
};

}  // namespace memprofile
