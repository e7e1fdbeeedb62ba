// `memprofile check FILE... [--root DIR] [--preload LIB] [--json]`
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"

namespace memprofile {

struct CheckOptions {
  std::vector<std::string> files;
  std::string root;     // "" = judge each file on its own
  std::string preload;  // "" = no preload library to check
  std::string ld_library_path;
  bool json = false;
  unsigned jobs = 0;  // 0 = one per core
};

void setup_check(CLI::App& app, ExitCode& exit_code);
ExitCode run_check(const CheckOptions& opts);

}  // namespace memprofile
