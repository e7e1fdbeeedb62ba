// Where an image's blobs come from: one implementation per source (a tar
// file, a stream, an OCI layout directory, a registry), all read the same way
// by load_images (image.cpp). Names are archive paths: "index.json",
// "manifest.json", "blobs/sha256/HEX", or a docker-archive's own names.
#pragma once

#include <string>

#include "image/layer.h"

namespace memprofile {

class Store {
 public:
  virtual ~Store() = default;
  // What the user named; prefixes every message.
  virtual std::string source() const = 0;
  virtual bool has(const std::string& name) const = 0;
  // A manifest, index or config: the whole blob, at most a few MiB.
  virtual std::string read_small(const std::string& name) = 0;
  // A layer blob, read in one streaming pass.
  virtual LayerSummary summarize(const std::string& name, const LayerLimits& limits) = 0;
  // Whether summarize may be called from several threads at once.
  virtual bool parallel() const = 0;
};

}  // namespace memprofile
