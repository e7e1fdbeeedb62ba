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

namespace memprofile {

// The pids that have a control socket in `dir`, in order.
std::vector<long> socket_pids(const std::string& dir);

// One request to a control socket and its JSON answer, within `timeout`
// seconds; throws FileError naming the socket when nobody answers (a stale
// socket, a stopped process, a busy control thread, a refused peer).
nlohmann::json ask_control(const std::string& socket, const std::string& request, double timeout);

// A process's environment as exec'd (`proc` is /proc/PID; unsetenv in the
// process does not change it), bounded like the kernel's ARG_MAX.
std::map<std::string, std::string> process_environ(const std::string& proc);

}  // namespace memprofile
