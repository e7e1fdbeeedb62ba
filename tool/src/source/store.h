// Where an image's blobs come from: one implementation per source (a tar
// file, a stream, an OCI layout directory, a registry), all read the same
// way by load_images (load.cpp). Names are archive paths: "index.json",
// "manifest.json", "blobs/sha256/HEX", or a docker-archive's own names.
#pragma once

#include <memory>
#include <string>

#include "base/stream.h"
#include "base/unique_fd.h"
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

// The local stores, one unit each:
// a tar file read by offset, its layers in parallel (archive_store.cpp);
std::unique_ptr<Store> open_tar_file(UniqueFd fd, const std::string& path);
// a tar stream read in one pass, layers summarised as they pass (once_store.cpp);
std::unique_ptr<Store> read_tar_stream(Reader& in, const std::string& name, const LayerLimits& limits);
// an OCI image layout directory, names resolved inside it (layout_store.cpp).
std::unique_ptr<Store> open_oci_layout(const std::string& dir);

// A manifest, index or config is read whole up to this size.
constexpr size_t kMaxSmallBlob = 4 << 20;
// Entries of an image archive itself (not of its layers): real ones hold a
// few hundred blobs; each kept name costs memory.
constexpr size_t kMaxArchiveEntries = 65536;

}  // namespace memprofile
