// The client side of the control library (ctl/ctl.h): which processes of
// an output directory serve a socket, requests to them, and the
// environment a process was exec'd with (where the launcher told it its
// socket is). `memprofile start|stop|snapshot|status` and `attached` run
// on it.
//
// Nothing a peer says that the kernel can check is believed (a worker that
// dropped to `nobody` shares the output directory with root's processes):
// the socket is opened without following a link and must be a socket owned
// by the process's uid or root; after connect, SO_PEERCRED must name the
// pid asked about; the reply's pid, program and snapshot files are checked
// against /proc and the directory before anyone shows them.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"

namespace memprofile {

// The pids that have a control socket in `dir`, in order.
std::vector<long> socket_pids(const std::string& dir);

// One process to ask: its pid as this pid namespace sees it, and the path
// of the socket that should be its.
struct ControlAsk {
  long pid = 0;
  std::string socket;
};

// What came of asking one process.
struct ControlAnswer {
  enum class Outcome {
    Answered,    // a reply, from that process, checked
    Stale,       // nobody listens (the process ended, or exec'd another program)
    Unanswered,  // a live socket that gave no answer in time, or that we may not connect to
    Refused,     // not the process's: a link, another owner, another pid, or a reply that lies
  };
  Outcome outcome = Outcome::Unanswered;
  nlohmann::json reply;  // when Answered
  std::string error;     // otherwise: "PATH: why", one line
};

// The most processes one tree command asks, and the most text and JSON
// values all their replies may hold together (the library's own reply is
// at most 64 KiB): a member that forks a thousand children, or answers
// with a flood, cannot hold the command or its memory.
constexpr size_t kMaxAskedProcesses = 1024;
constexpr size_t kMaxReplyBytes = 1u << 20;
constexpr size_t kMaxRepliesBytes = 32u << 20;
constexpr size_t kMaxReplyValues = 4096;
constexpr size_t kMaxRepliesValues = 1u << 17;

// Asks every process in `asks` the one request, all at once, within one
// deadline of `timeout` seconds for the whole call; one answer per ask, in
// order. At most kMaxAskedProcesses are asked; the rest are Unanswered,
// said so.
std::vector<ControlAnswer> ask_controls(const std::vector<ControlAsk>& asks, const std::string& request, double timeout);

// A socket whose process is gone, or no longer listens (a child that
// exec'd another program): nothing of the tree is left there to ask.
class StaleSocket : public FileError {
 public:
  using FileError::FileError;
};

// One request to the process `pid` through `socket` and its checked JSON
// answer, within `timeout` seconds; throws StaleSocket for a socket nobody
// listens on, and FileError naming the socket for every other failure.
nlohmann::json ask_control(const std::string& socket, long pid, const std::string& request, double timeout);

// A process's environment as exec'd (`proc` is /proc/PID; unsetenv in the
// process does not change it), bounded like the kernel's ARG_MAX.
std::map<std::string, std::string> process_environ(const std::string& proc);

}  // namespace memprofile
