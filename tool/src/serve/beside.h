// exec --serve: `memprofile serve` for the tree, in a child of the launcher
// forked just before it becomes the program (beside.cpp).
#pragma once

#include <string>

#include "base/event_log.h"
#include "runtime/launcher_config.h"

namespace memprofile {

// Starts serve for the tree of this process, which is about to become the
// program: it ends with the program and is no member of its tree. A
// setting that cannot serve (or `ctl_problem`: no control library) is said
// in one line on `log`, and the program runs without it.
void serve_beside(const LauncherConfig& cfg, const std::string& ctl_problem, EventLog& log);

}  // namespace memprofile
