#include "image/image_tree.h"

#include <fcntl.h>

#include <vector>

#include "base/error.h"

namespace memprofile {

namespace {
// What one node of the tree costs: the map's own node around the key and
// the value, and the allocator's header.
constexpr uint64_t kNodeCost = sizeof(std::string_view) + sizeof(LayerNode) + 4 * sizeof(void*) + 16;
}  // namespace

ImageTree::ImageTree(std::shared_ptr<MemoryBudget> budget) : held_(std::move(budget)) {
  LayerNode root;
  root.kind = LayerNode::Kind::Dir;
  root.mode = 0755;
  insert("/", std::move(root), "image");
}

void ImageTree::insert(std::string_view path, LayerNode&& node, const std::string& where) {
  node.path = {};  // the key holds the path
  auto [it, fresh] = nodes_.insert_or_assign(path, std::move(node));
  (void)it;
  if (!fresh) return;
  held_.add(kNodeCost, where, "the image's files and directories");
  // A second fence, in case a future change makes nodes cheaper than they are.
  if (nodes_.size() > kMaxTreeNodes)
    throw FileError(where, "the image holds more than " + std::to_string(kMaxTreeNodes) +
                               " files and directories (memprofile's limit)");
}

ImageTree::Nodes::iterator ImageTree::erase(Nodes::iterator it) {
  held_.give_back(kNodeCost);
  return nodes_.erase(it);
}

void ImageTree::remove_subtree(std::string_view path, bool keep_self) {
  if (!keep_self)
    if (auto self = nodes_.find(path); self != nodes_.end() && path != "/") erase(self);
  std::string prefix = path == "/" ? "/" : std::string(path) + "/";
  auto it = nodes_.lower_bound(std::string_view(prefix));
  while (it != nodes_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    if (it->first == "/") {
      ++it;
      continue;
    }
    it = erase(it);
  }
}

void ImageTree::ensure_parents(std::string_view path, const std::string& where) {
  // From the deepest parent up to the first directory that exists, then
  // down again creating what is missing: walking down from "/" would build
  // every prefix of every path (quadratic in a crafted path's depth).
  std::vector<size_t> missing;  // ends of the parent prefixes to create, deepest first
  for (size_t i = path.rfind('/'); i != std::string_view::npos && i > 0; i = path.rfind('/', i - 1)) {
    auto it = nodes_.find(path.substr(0, i));
    if (it != nodes_.end() && it->second.kind == LayerNode::Kind::Dir) break;
    // A file where a directory must be: the layer wins.
    if (it != nodes_.end()) remove_subtree(path.substr(0, i), false);
    missing.push_back(i);
  }
  for (auto end = missing.rbegin(); end != missing.rend(); ++end) {
    LayerNode d;
    d.kind = LayerNode::Kind::Dir;
    d.mode = 0755;
    // `path` lives in a layer's arena, which the tree keeps: a prefix of it
    // is a valid key as it is.
    insert(path.substr(0, *end), std::move(d), where);
  }
}

void ImageTree::note(std::string what) {
  if (anomalies_.size() < kMaxTreeAnomalies) anomalies_.push_back(std::move(what));
  else if (anomalies_.size() == kMaxTreeAnomalies) anomalies_.push_back("... and more");
}

void ImageTree::apply(LayerSummary&& layer) {
  // The names stay where the layer put them; the tree keeps their arena.
  arenas_.push_back(layer.names);
  for (const auto& a : layer.anomalies) note(layer.name + ": " + a);
  // Opaque directories and whiteouts hide what lower layers put there,
  // wherever the marker sits in this layer's tar.
  for (const auto& n : layer.nodes)
    if (n.kind == LayerNode::Kind::Opaque) remove_subtree(n.path, true);
  for (const auto& n : layer.nodes)
    if (n.kind == LayerNode::Kind::Whiteout) remove_subtree(n.path, false);
  // Taken from the front, so the layer's list shrinks as the tree grows.
  for (; !layer.nodes.empty(); layer.nodes.pop_front(), layer.held.give_back(sizeof(LayerNode))) {
    LayerNode& n = layer.nodes.front();
    if (n.kind == LayerNode::Kind::Opaque || n.kind == LayerNode::Kind::Whiteout) continue;
    ensure_parents(n.path, layer.name);
    auto it = nodes_.find(n.path);
    if (it != nodes_.end()) {
      bool merge = it->second.kind == LayerNode::Kind::Dir && n.kind == LayerNode::Kind::Dir;
      if (merge) {
        it->second.mode = n.mode;
        it->second.uid = n.uid;
        it->second.gid = n.gid;
        continue;
      }
      remove_subtree(n.path, false);
    }
    if (n.kind == LayerNode::Kind::Hardlink) {
      auto target = nodes_.find(n.link);
      // A hard link may name a symlink, a device or a fifo (the link is made
      // without following it), never a directory.
      if (target == nodes_.end() || target->second.kind == LayerNode::Kind::Dir) {
        note(layer.name + ": hard link " + std::string(n.path) + " -> " + std::string(n.link) +
             (target == nodes_.end() ? ": target missing" : ": target is a directory") + "; ignored");
        continue;
      }
      LayerNode copy = target->second;  // same inode: same content, mode and owner
      insert(n.path, std::move(copy), layer.name);
      continue;
    }
    std::string_view key = n.path;
    insert(key, std::move(n), layer.name);
  }
  // What stays charged: the names and kept contents the nodes point at.
  layers_held_.push_back(std::move(layer.held));
}

FsNode ImageTree::lstat(const std::string& path) const {
  FsNode f;
  auto it = nodes_.find(path);
  if (it == nodes_.end()) return f;
  const LayerNode& n = it->second;
  f.mode = n.mode;
  f.uid = n.uid;
  f.gid = n.gid;
  f.size = n.size;
  switch (n.kind) {
    case LayerNode::Kind::File: f.kind = FsNode::Kind::Regular; break;
    case LayerNode::Kind::Dir: f.kind = FsNode::Kind::Directory; break;
    case LayerNode::Kind::Symlink:
      f.kind = FsNode::Kind::Symlink;
      f.link_target = std::string(n.link);
      break;
    default: f.kind = FsNode::Kind::Other; break;
  }
  return f;
}

std::shared_ptr<const ElfInfo> ImageTree::elf(const std::string& path) const {
  auto it = nodes_.find(path);
  if (it == nodes_.end()) throw FileError(path, "no such file in the image");
  const auto& facts = it->second.facts;
  if (!facts) return nullptr;
  if (!facts->elf_error.empty()) throw Error(facts->elf_error);
  return facts->elf;
}

std::optional<std::string> ImageTree::read(const std::string& path, size_t limit) const {
  auto it = nodes_.find(path);
  if (it == nodes_.end() || !it->second.facts || it->second.facts->content.empty()) return std::nullopt;
  return it->second.facts->content.substr(0, limit);
}

int ImageTree::open_data(const std::string& path) const {
  auto it = nodes_.find(path);
  if (it == nodes_.end() || !it->second.facts || !it->second.facts->data) return -1;
  // A description of its own, at offset 0: a dup would share the offset.
  std::string self = "/proc/self/fd/" + std::to_string(it->second.facts->data->get());
  return ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
}

bool ImageTree::has_file_caps(const std::string& path) const {
  auto it = nodes_.find(path);
  return it != nodes_.end() && it->second.file_caps;
}

std::shared_ptr<const std::string> ImageTree::path_strings(const std::string& path) const {
  auto it = nodes_.find(path);
  if (it == nodes_.end() || !it->second.facts || it->second.facts->path_strings.empty()) return nullptr;
  return std::shared_ptr<const std::string>(it->second.facts, &it->second.facts->path_strings);
}

void ImageTree::walk(const std::string& dir, const std::function<void(const std::string&)>& on_file) const {
  std::string prefix = dir == "/" ? "/" : dir + "/";
  for (auto it = nodes_.lower_bound(std::string_view(prefix)); it != nodes_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
    if (it->second.kind == LayerNode::Kind::File) on_file(std::string(it->first));
}

}  // namespace memprofile
