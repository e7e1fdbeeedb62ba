// A command over a running tree (memprofile start|stop|snapshot|status, and
// serve): the processes of the tree found from /proc and the control
// sockets in the output directory, every one that serves asked at once
// within one deadline (control_client.h), and for each that does not, why.
// cli/cmd_control.cpp prints what this returns; serve turns it into
// profiles and metrics.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/launcher.h"
#include "runtime/memory.h"

namespace memprofile {

// The name exec --serve's child gives itself (PR_SET_NAME): a tree's
// listing leaves out the serve of that tree.
constexpr const char* kServeChildName = "memprofile-serv";

struct ControlRequest {
  std::string action;
  long pid = 1;
  bool pid_given = false;
  std::string output_dir, config = kDefaultConfigPath;
  double timeout = 60;
  bool json = false;
  bool only = false;  // PID alone, not its descendants
};

// The profile's own view of one process: bytes in use at its newest
// snapshot, scaled as report scales them (a jemalloc dump), or why status
// does not say (a continuous trace, no snapshot yet, none loaded).
struct ProfileInUse {
  bool known = false;
  double bytes = 0;
  std::string snapshot;  // its file
  std::string why;       // when not known ("" for --backend none: nothing to say)
};

// One process of the tree: its answer, or why it has none.
struct Member {
  long pid = 0, parent = 0;
  std::string comm;
  std::string socket;  // "" when it serves none
  nlohmann::json reply;  // its answer (null when none)
  ProcessMemory memory;  // the kernel's view (status)
  ProfileInUse profile;  // the profile's (status)
  std::string why;     // why it is not reached, or the request's failure
  std::string error;   // the connection's own error ("" when it answered, or has no socket)
  bool unanswered = false;  // a live socket that gave no answer (stopped, busy, refused us)
  bool refused = false;     // its socket, or its answer, is not that process's own (control_client.h)
  bool local = false;       // in this pid namespace's /proc (its end can be seen)
};

// What one command learnt of the tree: every member's answer, how many
// answered and failed, and for status where the memory is.
struct TreeAnswer {
  std::string dir;
  std::vector<Member> ms;
  std::vector<long> beyond;  // descendants under processes that are not profiled (members)
  size_t served = 0, failed = 0, unanswered = 0;
  uint64_t rss_all = 0, rss_profiled = 0, rss_beyond = 0;
  CgroupMemory cgroup;
};

// For status, the profile's view of a member from its answer and the
// directory: profile/ reads the dumps (heap_profile.h, profile_in_use).
using InUseReader = std::function<ProfileInUse(const nlohmann::json& reply, const std::string& dir)>;

// Finds the tree and asks it; for status also reads each member's memory
// (and its profile, with `in_use`) and the cgroup's. Throws Error or
// FileError when PID serves no socket and no member of its tree does.
TreeAnswer ask_tree(const ControlRequest& o, const InUseReader& in_use = nullptr);

// The first process's answer, as for one process, with the whole tree.
nlohmann::json tree_json(const ControlRequest& o, const TreeAnswer& t);
nlohmann::json member_json(const Member& m);

// The allocator's figures from a control reply, in one model (memory.h).
AllocatorView allocator_view(const nlohmann::json& r);

}  // namespace memprofile
