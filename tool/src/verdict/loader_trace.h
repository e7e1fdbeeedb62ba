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

// The same last word for memray: the image's own interpreter, run as the
// entrypoint reaches it with this environment (a RUN step's: the image's),
// imports memray's extension, and the file it imports is the one the static
// model found: MEMRAY_IMPORTED, else MEMRAY_NOT_IMPORTED first with the last
// line Python printed. Nothing of the app runs but what Python runs at
// start-up (.pth files, its sitecustomize); a child that does not end is
// killed with its process group (run_captured's caps).
void trace_import(PreflightResult& r);

}  // namespace memprofile
