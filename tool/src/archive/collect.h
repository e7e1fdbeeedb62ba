// `memprofile collect`'s work: wait until the profiles stop growing, then
// stream them as a tar with a manifest of names, sizes and sha256 last
// (collected.h reads it back), for `kubectl exec POD -- memprofile collect >
// prof.tar` (never `kubectl cp`, whose tar the profiler would be injected
// into).
#pragma once

#include <cstdint>
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
  uint64_t max_bytes = 0; // the most bytes of files carried (the profiles' disk budget; 0: no bound)
};

// Files collect leaves out, each said in one line and in the manifest's
// "skipped" list (never fatal for the rest):
//  - past the budget: the files carried add up to at most max_bytes;
//  - sparse: a file whose length is more than 16 times the data it holds
//    (SEEK_DATA/SEEK_HOLE, and over 1 MiB more): profilers write their
//    files densely; a planted sparse file would stream gigabytes that no
//    budget saw;
//  - another owner: a file owned by a uid that no process of the tree runs
//    as (root, collect's own uid, the uid of each live process with a
//    control socket or a record here, and the owners of the records of
//    processes that ended);
//  - gone, changed kind (a link, a fifo), or shrunk since it was listed.
// A file of at most kSpoolBytes is read whole before its entry is written,
// so it cannot shrink in the archive; a larger one that shrinks while it is
// streamed keeps its entry, zero-filled to the listed size, and the
// manifest lists it as skipped with "cut": true (read_collected leaves it
// out).
constexpr uint64_t kSpoolBytes = 64ull << 20;

// Each line to tell the user on standard error ("warning: skipped ...").
using Say = std::function<void(const std::string&)>;

// Writes the archive; returns how many files it holds. Throws FileError
// when there is nothing to collect, or the manifest would be larger than
// --verify accepts.
size_t collect_profiles(const CollectRequest& req, const Say& say);

}  // namespace memprofile
