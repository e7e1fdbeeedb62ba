// `memprofile attached`'s check of a live process: is the profiler's
// library mapped into it, is it writing, does its control library say it
// records? Each setting is found where the process got it (flags, this
// command's MEMPROFILE_* variables, the config file, the process's own
// environment and maps, the defaults), and where it came from is said.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/launcher_config.h"

namespace memprofile {

struct AttachRequest {
  int pid = 1;
  std::string config = kDefaultConfigPath;
  std::string backend, preload, output_dir;  // "" = found as above
  double window = 2.0;                       // seconds to watch the profiles grow
};

struct AttachedProfile {
  std::string path;
  uint64_t size = 0, grew = 0;  // bytes, and bytes gained in the window
};

struct Attachment {
  int pid = 1;
  std::string exe, linkage;
  Backend backend = kDefaultBackend;
  std::string backend_from, output_dir, output_dir_from;
  std::string library;                   // the mapped library's path, "" when not mapped
  std::vector<AttachedProfile> profiles;  // the process's own
  uint64_t output_dir_bytes = 0;         // every process's profiles there
  bool growing = false;
  std::optional<bool> recording;         // the control library's word, when it answers
  std::string stopped_reason;
  std::string control_error;             // why its socket, there, gave no answer
  double window = 0;
  bool attached = false;                 // mapped, into a dynamically linked program
};

// Reads /proc/PID, watches the profiles for the window, asks the control
// socket. Throws FileError when the process cannot be read.
Attachment check_attached(const AttachRequest& req);

}  // namespace memprofile
