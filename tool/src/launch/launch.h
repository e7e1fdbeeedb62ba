// `memprofile exec`'s work (launch.cpp): from its arguments to the execve
// that makes this process the profiled program.
#pragma once

#include <functional>
#include <string>

#include "base/error.h"
#include "base/event_log.h"
#include "runtime/launcher.h"
#include "runtime/launcher_config.h"

namespace memprofile {

// What starts beside the program before this process becomes it (exec
// --serve: serve/beside.h), given the settings, why the control library
// cannot load ("" when it can) and the log. Called only when a serve
// address is set.
using ServeBeside = std::function<void(const LauncherConfig& cfg, const std::string& ctl_problem, EventLog& log)>;

// Checks, sets up and becomes the program; returns only when it does not
// (a refusal, a program not found, --strict), with the exit code.
ExitCode launch(const ExecArgs& args, EventLog& log, const ServeBeside& serve_beside);

}  // namespace memprofile
