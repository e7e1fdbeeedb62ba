#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>

#include "base/json_text.h"
#include "base/terminal.h"
#include "cli/commands.h"
#include "cli/logger.h"

namespace memprofile {

void start_text_log() {
  auto logger = spdlog::stderr_color_st("memprofile");
  logger->set_pattern("memprofile: %^%l%$: %v");
  spdlog::set_default_logger(logger);
}

void set_log_verbose(bool verbose) { spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info); }
bool log_verbose() { return spdlog::get_level() <= spdlog::level::debug; }

Logger::Logger(const std::string& format) : json_(format == "json") {}

void Logger::info(const std::string& e, const std::string& m, const nlohmann::json& f) { emit("info", e, m, f); }
void Logger::warn(const std::string& e, const std::string& m, const nlohmann::json& f) { emit("warning", e, m, f); }
void Logger::error(const std::string& e, const std::string& m, const nlohmann::json& f) { emit("error", e, m, f); }

void Logger::emit(const char* level, const std::string& event, const std::string& msg, const nlohmann::json& fields) {
  auto lvl = std::string(level) == "error" ? spdlog::level::err
             : std::string(level) == "warning" ? spdlog::level::warn
                                                : spdlog::level::info;
  if (!json_) {
    spdlog::log(lvl, "{}", terminal_safe(msg));  // spdlog writes to stderr's FILE, not std::cerr
    return;
  }
  char ts[32];
  std::time_t now = std::time(nullptr);
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  nlohmann::json j = {{"time", ts}, {"level", level}, {"logger", "memprofile"}, {"event", event}, {"msg", msg}};
  if (fields.is_object())
    for (auto it = fields.begin(); it != fields.end(); ++it) j[it.key()] = it.value();
  // The JSON line goes out verbatim, bypassing the text pattern.
  std::fprintf(stderr, "%s\n", json_text(j).c_str());
  std::fflush(stderr);
}

}  // namespace memprofile
