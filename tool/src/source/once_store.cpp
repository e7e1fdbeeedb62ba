// A tar archive from a stream (standard input, a compressed archive, a
// daemon's `docker save`): one pass. JSON entries (manifests, indexes,
// configs) are kept; every other blob is summarised as a layer as it
// passes, since it cannot be re-read, whatever its size. The manifest may
// come last, so a blob is not known to be a layer until the end: one that is
// not a readable layer (an attestation, a signature) keeps its error, which
// counts only if a manifest lists it.
#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <set>

#include "base/tar_reader.h"
#include "source/names.h"
#include "source/store.h"

namespace memprofile {

namespace {

constexpr uint64_t kMaxKeptSmall = 16ull << 20;  // JSON entries kept from a stream

class TarEntryReader : public Reader {
 public:
  explicit TarEntryReader(TarReader& t) : t_(t) {}
  size_t read(void* buf, size_t n) override { return t_.read(buf, n); }

 private:
  TarReader& t_;
};

class OnceStore : public Store {
 public:
  OnceStore(Reader& in, std::string name, const LayerLimits& limits) : name_(std::move(name)) {
    TarReader tar(in, name_);
    TarEntry e;
    for (size_t count = 0; tar.next(e);) {
      if (++count > kMaxArchiveEntries) throw too_many_entries(name_);
      std::string n = clean_name(e.name);
      if (e.type == '1' || e.type == '2') aliases_[n] = link_target(e.type, n, e.linkname);
      if (e.type == '0' || e.type == '7') take_entry(tar, e, n, limits);
    }
  }
  std::string source() const override { return name_; }
  bool parallel() const override { return false; }
  bool has(const std::string& name) const override {
    std::string n = resolve(name);
    return small_.count(n) || summaries_.count(n) || taken_.count(n) || failed_.count(n);
  }
  std::string read_small(const std::string& name) override {
    auto it = small_.find(resolve(name));
    if (it == small_.end())
      throw FileError(name_, (has(name) ? "not a JSON manifest or config: " : "missing blob ") + name);
    return it->second;
  }
  LayerSummary summarize(const std::string& name, const LayerLimits& limits) override {
    std::string n = resolve(name);
    // Handed over, not copied: a layer's summary is the largest thing a run
    // keeps, and load_images asks for each blob once.
    if (auto it = summaries_.find(n); it != summaries_.end()) {
      LayerSummary out = std::move(it->second);
      summaries_.erase(it);
      taken_.insert(n);
      return out;
    }
    if (taken_.count(n)) throw Error(name_ + ": layer " + n + " was read twice (memprofile bug)");
    if (auto it = failed_.find(n); it != failed_.end()) std::rethrow_exception(it->second);
    auto it = small_.find(n);
    if (it == small_.end()) throw FileError(name_, "missing blob " + name);
    MemReader r(it->second.data(), it->second.size());
    return summarize_layer(r, name_ + ":" + n, limits);
  }

 private:
  // A regular entry as it passes: kept whole when it looks like JSON,
  // else summarised as a layer (or its error kept). A later entry of the
  // same name replaces an earlier one, as tar extraction would.
  void take_entry(TarReader& tar, const TarEntry& e, const std::string& n, const LayerLimits& limits) {
    TarEntryReader r(tar);
    std::string head(static_cast<size_t>(std::min<uint64_t>(e.size, 512)), '\0');
    r.read_exact(head.data(), head.size(), name_ + ":" + n);
    if (e.size <= kMaxSmallBlob && looks_like_json(head)) {
      kept_ += e.size;
      if (kept_ > kMaxKeptSmall)
        throw FileError(name_, "more than " + std::to_string(kMaxKeptSmall >> 20) +
                                   " MiB of manifests and configs in a stream; save the archive to a file");
      size_t have = head.size();
      std::string bytes = std::move(head);
      bytes.resize(static_cast<size_t>(e.size));
      r.read_exact(bytes.data() + have, bytes.size() - have, name_ + ":" + n);
      small_[n] = std::move(bytes);
      summaries_.erase(n);
      failed_.erase(n);
      return;
    }
    small_.erase(n);
    PrefixedReader blob(std::move(head), r);
    try {
      summaries_[n] = summarize_layer(blob, name_ + ":" + n, limits);
      failed_.erase(n);
    } catch (const FileError&) {
      summaries_.erase(n);
      failed_[n] = std::current_exception();
    }
  }
  static bool looks_like_json(const std::string& head) {
    size_t i = head.find_first_not_of(" \t\r\n");
    return i != std::string::npos && (head[i] == '{' || head[i] == '[');
  }
  std::string resolve(const std::string& n) const { return follow_aliases(aliases_, n); }
  std::string name_;
  uint64_t kept_ = 0;  // bytes of JSON entries kept
  std::map<std::string, std::string> small_, aliases_;
  std::map<std::string, LayerSummary> summaries_;
  std::set<std::string> taken_;  // summaries handed over
  std::map<std::string, std::exception_ptr> failed_;  // blob -> why it is not a readable layer
};

}  // namespace

std::unique_ptr<Store> read_tar_stream(Reader& in, const std::string& name, const LayerLimits& limits) {
  return std::make_unique<OnceStore>(in, name, limits);
}

}  // namespace memprofile
