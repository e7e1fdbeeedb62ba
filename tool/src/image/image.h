// An image as memprofile judges it: its config (entrypoint, environment,
// platform) and its flattened file tree. Where images come from and how
// they are read is source/ (load_images).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "image/file_tree.h"
#include "image/layer.h"

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

// Parses an image config blob (the JSON with "config" and "rootfs").
ImageConfig parse_image_config(const std::string& json, const std::string& name);

}  // namespace memprofile
