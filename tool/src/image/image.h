// Reading container images without a daemon and without extracting them:
// `docker save` archives (legacy and Docker >= 25's OCI layout inside the
// tar), OCI image layout directories and OCI archives, from a file or a
// non-seekable stream. Every blob is checked against its digest, every layer
// against its diff_id; layers are summarised in parallel where the input can
// be read at several offsets at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "image/file_tree.h"
#include "image/layer.h"
#include "image/registry.h"

namespace memprofile {

struct Platform {
  std::string os, architecture, variant;
  std::string str() const;  // "linux/arm64/v8"
  static Platform parse(const std::string& s);
  static Platform host();
  bool matches(const Platform& want) const;  // an empty field in `want` matches anything
};

struct ImageConfig {
  std::vector<std::string> entrypoint, cmd, env;
  std::string user, working_dir;
  Platform platform;
  std::vector<std::string> diff_ids;
  std::string env_value(const std::string& key, bool* present = nullptr) const;
};

struct LoadedImage {
  std::string source;     // what the user named
  std::string format;     // docker-archive, oci-layout, oci-archive, rootfs
  std::string reference;  // manifest digest or tag, when known
  ImageConfig config;
  std::shared_ptr<FileTree> tree;
  std::vector<std::string> anomalies;
  std::vector<std::string> notes;
  uint64_t layers = 0, layer_bytes = 0;
};

struct ImageLoadOptions {
  std::string platform;       // "" = the only one, or the host's
  bool all_platforms = false;
  unsigned jobs = 0;          // parallel layer workers (0 = cores)
  LayerLimits limits;
  RegistryOptions registry;   // docker://REF sources
};

// Loads the image(s) at `source` ("-" for standard input, "docker://REF" for a
// registry).
std::vector<LoadedImage> load_images(const std::string& source, const ImageLoadOptions& opts);

// Parses an image config blob (the JSON with "config" and "rootfs").
ImageConfig parse_image_config(const std::string& json, const std::string& name);

}  // namespace memprofile
