// serve's /metrics: a running tree's memory in Prometheus' text format
// (version 0.0.4), from one `status` of the tree (runtime/tree_control.h).
// Per process, labelled pid, program and backend: RSS and the kernel's
// split, the allocator's view, the profile's bytes in use, the gap by
// cause, whether it is recording and whether it answered. Per tree: the
// processes, the cgroup's charge and the profiles' disk budget.
#pragma once

#include <string>

#include "runtime/tree_control.h"

namespace memprofile {

// Asks the tree of `target` for its status (the action is set here).
// Throws Error when no member of it serves.
std::string tree_metrics(const ControlRequest& target);

// The text for an answer already had (tests).
std::string metrics_text(const TreeAnswer& t);

}  // namespace memprofile
