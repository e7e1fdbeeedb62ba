// `memprofile collect`'s work: wait until the profiles stop growing, then
// stream them as a tar with a manifest of names, sizes and sha256 last
// (collected.h reads it back), for `kubectl exec POD -- memprofile collect >
// prof.tar` (never `kubectl cp`, whose tar the profiler would be injected
// into).
#pragma once

#include <functional>
#include <string>

#include "runtime/backend.h"

namespace memprofile {

struct CollectRequest {
  Backend backend = Backend::Bytehound;
  std::string output_dir;
  std::string out = "-";  // the tar: a file, or "-" for standard output
  double settle = 3;      // seconds the files must stay the same size
  double timeout = 90;    // most seconds to wait for that
  int suspend_pid = 0;    // bytehound: pause tracking in this process around the copy (0 = no)
};

// Each line to tell the user on standard error ("warning: skipped ...").
using Say = std::function<void(const std::string&)>;

// Writes the archive; returns how many files it holds. Throws FileError
// when there is nothing to collect, the manifest would be larger than
// --verify accepts, or a file shrank while it was copied.
size_t collect_profiles(const CollectRequest& req, const Say& say);

}  // namespace memprofile
