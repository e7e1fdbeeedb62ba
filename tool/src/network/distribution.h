// Images straight from a registry (`docker://HOST[:PORT]/REPO[:TAG|@DIGEST]`,
// skopeo's transport syntax), over the OCI distribution API: manifests and
// configs fetched whole under a cap, layer blobs streamed into the one-pass
// layer reader with their digests checked as the bytes arrive. Nothing is
// written to disk. The Store it returns is read by load_images like any
// archive (source/load.cpp).
#pragma once

#include <memory>
#include <string>

#include "source/kinds.h"
#include "source/store.h"

namespace memprofile {

// Connects, resolves the reference to its manifest (or index) and returns
// the image's blobs as a Store. registries.conf may block the reference,
// move it (location) or put mirrors before it: the first source that
// resolves the manifest serves every blob. Throws FileError naming `source`.
std::unique_ptr<Store> open_registry(const std::string& source, const RegistryOptions& opts);

}  // namespace memprofile
