// Reading container images without a daemon and without extracting them:
// `docker save` archives (legacy and Docker >= 25's OCI layout inside the
// tar), OCI image layout directories and OCI archives, from a file or a
// non-seekable stream, and the network sources the caller hands in
// (sources.h). Every blob is checked against its digest, every layer
// against its diff_id; layers are summarised in parallel where the source
// can be read at several offsets at once.
#pragma once

#include <string>
#include <vector>

#include "image/image.h"
#include "source/kinds.h"

namespace memprofile {

struct ImageLoadOptions {
  std::string platform;       // "" = the only one, or the host's
  bool all_platforms = false;
  unsigned jobs = 0;          // parallel layer workers (0 = cores)
  SourceOptions source;       // limits, registry settings, network kinds
};

// Loads the image(s) at `source`, in four steps: open the source, read its
// candidates (manifests and configs), choose the platforms, assemble each
// chosen image's tree.
std::vector<LoadedImage> load_images(const std::string& source, const ImageLoadOptions& opts);

}  // namespace memprofile
