// preflight --trace-loader: the image's own loader as the last word. Runs
// the target with LD_TRACE_LOADED_OBJECTS=1 and LD_PRELOAD: the image's
// ld.so maps everything, prints the list and exits before any of the
// program's code runs. The library must be on that list: else the finding
// PRELOAD_NOT_LOADED comes first, with the loader's first line; if it is,
// LOADER_TRACED says so. Only for a root that is this machine's own
// (`--rootfs /`, inside the image).
#pragma once

#include "verdict/preflight.h"

namespace memprofile {

void trace_loader(PreflightResult& r);

}  // namespace memprofile
