// A tar archive read from a descriptor that can be read at any offset: the
// index pass skips content, layers are then read in parallel.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "base/tar_reader.h"
#include "source/names.h"
#include "source/store.h"

namespace memprofile {

namespace {

class TarFileStore : public Store {
 public:
  TarFileStore(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) { index(); }
  std::string source() const override { return path_; }
  bool parallel() const override { return true; }
  bool has(const std::string& name) const override { return entries_.count(resolve(name)) > 0; }
  std::string read_small(const std::string& name) override {
    const auto& [off, size] = find(name);
    if (size > kMaxSmallBlob)
      throw FileError(path_ + ":" + name, "too large for a manifest or config (" + std::to_string(size) + " bytes)");
    std::string out(static_cast<size_t>(size), '\0');
    FdReader r(fd_.get(), path_, off, size);
    r.read_exact(out.data(), out.size(), path_ + ":" + name);
    return out;
  }
  LayerSummary summarize(const std::string& name, const LayerLimits& limits) override {
    const auto& [off, size] = find(name);
    FdReader r(fd_.get(), path_, off, size);
    return summarize_layer(r, path_ + ":" + name, limits);
  }

 private:
  // One pass over the headers: where each regular entry's bytes are, and
  // which names are links to which.
  void index() {
    struct stat st;
    if (fstat(fd_.get(), &st) != 0) throw FileError(path_, std::string("cannot stat: ") + std::strerror(errno));
    FdReader whole(fd_.get(), path_, 0, static_cast<uint64_t>(st.st_size));
    TarReader tar(whole, path_);
    TarEntry e;
    for (size_t count = 0; tar.next(e);) {
      if (++count > kMaxArchiveEntries) throw too_many_entries(path_);
      std::string n = clean_name(e.name);
      // A blob is read later by offset, which a sparse entry's holes forbid.
      if ((e.type == '0' || e.type == '7') && !e.sparse) entries_[n] = {tar.content_offset(), e.size};
      if (e.type == '1' || e.type == '2') aliases_[n] = link_target(e.type, n, e.linkname);
    }
  }
  std::string resolve(const std::string& n) const { return follow_aliases(aliases_, n); }
  const std::pair<uint64_t, uint64_t>& find(const std::string& name) const {
    auto it = entries_.find(resolve(name));
    if (it == entries_.end()) throw FileError(path_, "missing blob " + name);
    return it->second;
  }
  UniqueFd fd_;
  std::string path_;
  std::map<std::string, std::pair<uint64_t, uint64_t>> entries_;  // name -> offset, size
  std::map<std::string, std::string> aliases_;
};

}  // namespace

std::unique_ptr<Store> open_tar_file(UniqueFd fd, const std::string& path) {
  return std::make_unique<TarFileStore>(std::move(fd), path);
}

}  // namespace memprofile
