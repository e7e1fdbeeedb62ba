// One worker pool for every job that spreads independent items over the
// cores: layers of an image, files of a directory scan.
#pragma once

#include <cstddef>
#include <functional>

namespace memprofile {

// `requested` workers, or one per core when it is 0.
unsigned worker_count(unsigned requested);

// Calls fn(i) for every i in [0, n) on at most `workers` threads, the
// caller's among them. The first exception stops the pool: no thread starts
// another item. Once all have stopped, the exception of the lowest item that
// threw is rethrown, so the answer does not depend on the threads' timing.
void parallel_for(size_t n, unsigned workers, const std::function<void(size_t)>& fn);

}  // namespace memprofile
