// The network kinds of the static binary: it is built without libcurl
// (Debian ships no static libcurl dependencies), so each says in one line
// what to use instead.
#include "source/kinds.h"

namespace memprofile {

namespace {

[[noreturn]] OpenedSource no_registry(const std::string& name, const SourceOptions&) {
  throw FileError(name, "this memprofile (the static binary) is built without registry access; use the "
                        "dynamically linked memprofile, or copy the image to an archive first (skopeo copy)");
}

[[noreturn]] OpenedSource no_daemon(const std::string& name, const SourceOptions&) {
  throw FileError(name, "this memprofile (the static binary) is built without the Docker daemon source; use the "
                        "dynamically linked memprofile, or `docker save` the image to a file first");
}

}  // namespace

const std::vector<SourceKind>& network_sources() {
  static const std::vector<SourceKind> kinds = {{kRegistryPrefix, no_registry}, {kDaemonPrefix, no_daemon}};
  return kinds;
}

}  // namespace memprofile
