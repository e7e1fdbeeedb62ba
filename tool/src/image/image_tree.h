// An image's root filesystem, flattened from layer summaries as the OCI
// image-spec (layer.md) says: whiteouts and opaque markers delete from lower
// layers only, a later entry replaces an earlier one (a directory over a
// directory merges), hard links take their target's content, and nothing is
// ever written to disk.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "image/file_tree.h"
#include "image/layer.h"

namespace memprofile {

// Files and directories one image may hold (real ones hold up to a few
// hundred thousand); each costs a few hundred bytes of memory.
constexpr size_t kMaxTreeNodes = 1u << 20;
// Anomalies listed one by one; past these, "... and more".
constexpr size_t kMaxTreeAnomalies = 256;

class ImageTree : public FileTree {
 public:
  ImageTree();
  // Applies one layer on top of what is there (taking its nodes); records
  // anomalies.
  void apply(LayerSummary&& layer);
  const std::vector<std::string>& anomalies() const { return anomalies_; }
  size_t size() const { return nodes_.size(); }
  // Path-like strings found in the ELF file at `path`, '\n'-separated.
  std::shared_ptr<const std::string> path_strings(const std::string& path) const;

  FsNode lstat(const std::string& path) const override;
  std::shared_ptr<const ElfInfo> elf(const std::string& path) const override;
  std::shared_ptr<const ElfInfo> elf_once(const std::string& path) const override { return elf(path); }
  std::optional<std::string> read(const std::string& path, size_t limit) const override;
  bool has_file_caps(const std::string& path) const override;
  std::string display(const std::string& path) const override { return path; }
  void walk(const std::string& dir, const std::function<void(const std::string&)>& on_file) const override;

 private:
  void remove_subtree(const std::string& path, bool keep_self);
  void ensure_parents(const std::string& path);
  void note(std::string what);  // an anomaly, up to kMaxTreeAnomalies of them
  std::map<std::string, LayerNode> nodes_;
  std::vector<std::string> anomalies_;
};

}  // namespace memprofile
