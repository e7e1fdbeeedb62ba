// An OCI image layout directory; names resolve inside it, never outside.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "image/file_tree.h"
#include "source/names.h"
#include "source/store.h"

namespace memprofile {

namespace {

class DirStore : public Store {
 public:
  explicit DirStore(const std::string& dir) : dir_(dir), tree_(dir) {}
  std::string source() const override { return dir_; }
  bool parallel() const override { return true; }
  bool has(const std::string& name) const override {
    auto r = resolve(tree_, "/" + clean_name(name));
    return r && r->node.kind == FsNode::Kind::Regular;
  }
  std::string read_small(const std::string& name) override {
    UniqueFd fd = open_blob(name);
    if (size_of(fd) > kMaxSmallBlob) throw FileError(dir_ + "/" + name, "too large for a manifest or config");
    std::string out(static_cast<size_t>(size_of(fd)), '\0');
    FdReader r(fd.get(), dir_ + "/" + name, 0, out.size());
    r.read_exact(out.data(), out.size(), dir_ + "/" + name);
    return out;
  }
  LayerSummary summarize(const std::string& name, const LayerLimits& limits) override {
    UniqueFd fd = open_blob(name);
    FdReader r(fd.get(), dir_ + "/" + name, 0, size_of(fd));
    return summarize_layer(r, dir_ + "/" + name, limits);
  }

 private:
  UniqueFd open_blob(const std::string& name) const {
    auto r = resolve(tree_, "/" + clean_name(name));
    if (!r || r->node.kind != FsNode::Kind::Regular) throw FileError(dir_, "missing blob " + name);
    UniqueFd fd(tree_.open_file(r->path));
    if (!fd) throw FileError(dir_ + "/" + name, std::string("cannot open: ") + std::strerror(errno));
    return fd;
  }
  static uint64_t size_of(const UniqueFd& fd) {
    struct stat st;
    return fstat(fd.get(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  }
  std::string dir_;
  HostTree tree_;
};

}  // namespace

std::unique_ptr<Store> open_oci_layout(const std::string& dir) { return std::make_unique<DirStore>(dir); }

}  // namespace memprofile
