// `memprofile report`: from heap profiles to the allocation sites that hold
// the memory and the ones that grew (docs/report.md).
#pragma once

#include <CLI/CLI.hpp>

#include "base/error.h"

namespace memprofile {

void setup_report(CLI::App& app, ExitCode& exit_code);

}  // namespace memprofile
