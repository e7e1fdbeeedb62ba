// An image's root filesystem, flattened from layer summaries as the OCI
// image-spec (layer.md) says: whiteouts and opaque markers delete from lower
// layers only, a later entry replaces an earlier one (a directory over a
// directory merges), hard links take their target's content, and nothing is
// ever written to disk.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "image/file_tree.h"
#include "image/layer.h"

namespace memprofile {

// Files and directories one image may hold (real ones hold up to a few
// hundred thousand). Each costs its node and its name, charged to the run's
// memory budget, which usually ends a crafted image well before this.
constexpr size_t kMaxTreeNodes = 1u << 20;
// Anomalies listed one by one; past these, "... and more".
constexpr size_t kMaxTreeAnomalies = 256;

class ImageTree : public FileTree {
 public:
  // Nodes are charged to `budget`, shared with the layers of the same run.
  explicit ImageTree(std::shared_ptr<MemoryBudget> budget = std::make_shared<MemoryBudget>());
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
  int open_data(const std::string& path) const override;
  bool has_file_caps(const std::string& path) const override;
  std::string display(const std::string& path) const override { return path; }
  void walk(const std::string& dir, const std::function<void(const std::string&)>& on_file) const override;

 private:
  using Nodes = std::map<std::string_view, LayerNode, std::less<>>;
  void remove_subtree(std::string_view path, bool keep_self);
  Nodes::iterator erase(Nodes::iterator it);
  void insert(std::string_view path, LayerNode&& node, const std::string& where);
  void ensure_parents(std::string_view path, const std::string& where);
  void note(std::string what);  // an anomaly, up to kMaxTreeAnomalies of them
  // Keys and links are views into the applied layers' arenas and our own.
  Nodes nodes_;
  std::vector<std::shared_ptr<StringArena>> arenas_;
  std::vector<Charge> layers_held_;  // names and contents of the applied layers
  Charge held_;                      // the nodes
  std::vector<std::string> anomalies_;
};

}  // namespace memprofile
