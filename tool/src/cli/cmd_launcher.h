// The in-container commands: `exec` (the verified entrypoint), `attached`
// and `collect` (run with kubectl exec). The binary is static, so an
// LD_PRELOAD in the pod's environment never loads into them.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

namespace memprofile {

// exec --strict refused to start the program (documented in docs/launcher.md).
constexpr int kExitRefused = 3;

void setup_exec(CLI::App& app, int& exit_code);
void setup_attached(CLI::App& app, int& exit_code);
void setup_collect(CLI::App& app, int& exit_code);
void setup_image_setup(CLI::App& app, int& exit_code);

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
