// The client side of the control library (ctl/ctl.h): which processes of
// an output directory serve a socket, one request to one of them, and the
// environment a process was exec'd with (where the launcher told it its
// socket is). `memprofile start|stop|snapshot|status` and `attached` run
// on it.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"

namespace memprofile {

// The pids that have a control socket in `dir`, in order.
std::vector<long> socket_pids(const std::string& dir);

// A socket whose process is gone, or no longer listens (a child that
// exec'd another program): nothing of the tree is left there to ask.
class StaleSocket : public FileError {
 public:
  using FileError::FileError;
};

// One request to a control socket and its JSON answer, within `timeout`
// seconds; throws StaleSocket for a socket nobody listens on, and
// FileError naming the socket when a live one gives no answer (a stopped
// process, a busy control thread, a refused peer).
nlohmann::json ask_control(const std::string& socket, const std::string& request, double timeout);

// A process's environment as exec'd (`proc` is /proc/PID; unsetenv in the
// process does not change it), bounded like the kernel's ARG_MAX.
std::map<std::string, std::string> process_environ(const std::string& proc);

}  // namespace memprofile
