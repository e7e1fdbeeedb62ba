// The network kinds of the memprofile binary: `docker://` over the
// distribution API, `docker-daemon:` over the Engine API, whose `docker
// save` stream is read in one pass as standard input is.
#include "source/kinds.h"

#include "network/daemon.h"
#include "network/distribution.h"

namespace memprofile {

namespace {

OpenedSource registry_source(const std::string& name, const SourceOptions& opts) {
  return {open_registry(name, opts.registry), "registry"};
}

OpenedSource daemon_source(const std::string& name, const SourceOptions& opts) {
  std::unique_ptr<Reader> saved = open_daemon_image(name);
  return {read_tar_stream(*saved, name, opts.limits), ""};
}

}  // namespace

const std::vector<SourceKind>& network_sources() {
  static const std::vector<SourceKind> kinds = {{kRegistryPrefix, registry_source}, {kDaemonPrefix, daemon_source}};
  return kinds;
}

}  // namespace memprofile
