// What an image source holds, read from its manifests: the candidate images
// (one per platform of an index, one per entry of a docker-archive's
// manifest.json), each with its config and layer blobs. Every manifest and
// index is checked against its digest as it is read.
#pragma once

#include <string>
#include <vector>

#include "image/image.h"
#include "source/store.h"

namespace memprofile {

struct Candidate {
  Platform platform;
  std::string reference;  // manifest digest or repo tag
  std::string config;     // blob name
  std::vector<std::string> layers;
  std::vector<std::string> layer_digests;  // expected sha256 hex of each stored blob, "" when unknown
  std::string format;
};

// The candidates of an OCI layout or archive (index.json), of a
// docker-archive (manifest.json), or of Docker >= 25's archives that hold
// both. `format` = "" keeps the format the manifests tell.
std::vector<Candidate> read_candidates(Store& store, const std::string& format);

}  // namespace memprofile
