// exec's log: one structured line per event on stderr.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/event_log.h"

namespace memprofile {

// The process's text log on stderr ("memprofile: LEVEL: ..."), debug lines
// only when verbose. spdlog is compiled in logger.cpp alone: its headers
// (with fmt's) cost each file that includes them seconds to compile.
void start_text_log();
void set_log_verbose(bool verbose);
// Whether -v/--verbose was given.
bool log_verbose();

// One structured line per event on stderr: text ("memprofile: info: ...")
// or JSON ({"level":...,"event":...,"msg":...,<fields>}).
class Logger : public EventLog {
 public:
  explicit Logger(const std::string& format);
  void info(const std::string& event, const std::string& msg, const nlohmann::json& fields) override;
  void warn(const std::string& event, const std::string& msg, const nlohmann::json& fields) override;
  void error(const std::string& event, const std::string& msg, const nlohmann::json& fields) override;

 private:
  void emit(const char* level, const std::string& event, const std::string& msg, const nlohmann::json& fields);
  bool json_;
};

}  // namespace memprofile
