// What start|stop|snapshot|status print of a tree's answer
// (tree_control.h): a line per member (a block for status, with where its
// memory is), one on stderr per member not reached, and status's tree and
// cgroup lines.
#pragma once

#include "runtime/tree_control.h"

namespace memprofile {

void print_members(const ControlRequest& o, const TreeAnswer& t);
// status's last lines: the tree's RSS and its profiled share, the cgroup.
void print_tree_memory(const TreeAnswer& t);

}  // namespace memprofile
