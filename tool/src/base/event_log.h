// Where a command says what it does, one structured event at a time: an
// event name, one line for people, and fields for machines. cli/logger.h
// writes it to stderr as text or JSON; the layers below only call it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace memprofile {

class EventLog {
 public:
  virtual ~EventLog() = default;
  virtual void info(const std::string& event, const std::string& msg, const nlohmann::json& fields) = 0;
  virtual void warn(const std::string& event, const std::string& msg, const nlohmann::json& fields) = 0;
  virtual void error(const std::string& event, const std::string& msg, const nlohmann::json& fields) = 0;
};

}  // namespace memprofile
