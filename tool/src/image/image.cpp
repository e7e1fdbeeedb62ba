#include "image/image.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/error.h"
#include "base/json_text.h"
#include "image/daemon.h"
#include "image/image_tree.h"
#include "image/store.h"
#include "base/tar_reader.h"
#include "base/unique_fd.h"

namespace memprofile {

using nlohmann::json;

namespace {

constexpr size_t kMaxJson = 4 << 20;             // manifests, indexes, configs
constexpr uint64_t kMaxKeptSmall = 16ull << 20;   // JSON entries kept from a stream
constexpr int kMaxIndexDepth = 4;
// More layers than any runtime stacks (overlayfs and Docker stop near 128);
// a manifest that lists more is crafted, and each listing costs a pass.
constexpr size_t kMaxLayers = 500;
// Entries of an image archive itself (not of its layers): real ones hold a
// few hundred blobs; each kept name costs memory.
constexpr size_t kMaxArchiveEntries = 65536;
// Manifests listed by an image's indexes in all (a multi-platform image lists
// a few dozen).
constexpr size_t kMaxDescriptors = 4096;

// ---- platforms and configs ------------------------------------------------

std::string str_or(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::vector<std::string> str_list(const json& j, const char* key, const std::string& name) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_array()) throw FileError(name, std::string("\"") + key + "\" is not an array of strings");
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string()) throw FileError(name, std::string("\"") + key + "\" is not an array of strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

json parse_json(const std::string& text, const std::string& name) {
  json j = parse_json_bounded(text, name);
  if (!j.is_object() && !j.is_array()) throw FileError(name, "malformed JSON: not an object");
  return j;
}

// "./a//b/../c" -> "a/c": names inside an archive, relative to its root.
std::string clean_name(const std::string& raw) { return normalize_path("/" + raw).substr(1); }

// Follows symlink and hard-link entries of an archive (names -> targets).
std::string follow_aliases(const std::map<std::string, std::string>& aliases, std::string n) {
  n = clean_name(n);
  for (int i = 0; i < 16; ++i) {
    auto it = aliases.find(n);
    if (it == aliases.end()) return n;
    n = it->second;
  }
  return n;
}

std::string blob_name(const std::string& digest, const std::string& where) {
  size_t colon = digest.find(':');
  std::string alg = colon == std::string::npos ? "" : digest.substr(0, colon);
  std::string hex = colon == std::string::npos ? "" : digest.substr(colon + 1);
  bool ok = alg == "sha256" && hex.size() == 64 &&
            hex.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!ok) throw FileError(where, "unsupported or malformed digest \"" + digest + "\"");
  return "blobs/sha256/" + hex;
}

// ---- where blobs come from -----------------------------------------------

FileError too_many_entries(const std::string& where) {
  return FileError(where, "the archive holds more than " + std::to_string(kMaxArchiveEntries) +
                              " entries; an image archive holds a few hundred blobs");
}

// A tar archive read from a descriptor we can pread at any offset: the
// index pass skips content, layers are then read in parallel.
class TarFileStore : public Store {
 public:
  TarFileStore(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {
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
      if (e.type == '2') aliases_[n] = clean_name(dirname_of("/" + n).substr(1) + "/" + e.linkname);
      if (e.type == '1') aliases_[n] = clean_name(e.linkname);
    }
  }
  std::string source() const override { return path_; }
  bool parallel() const override { return true; }
  bool has(const std::string& name) const override { return entries_.count(resolve(name)) > 0; }
  std::string read_small(const std::string& name) override {
    const auto& [off, size] = find(name);
    if (size > kMaxJson) throw FileError(path_ + ":" + name, "too large for a manifest or config (" + std::to_string(size) + " bytes)");
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
  std::string resolve(const std::string& n) const { return follow_aliases(aliases_, n); }
  const std::pair<uint64_t, uint64_t>& find(const std::string& name) const {
    auto it = entries_.find(resolve(name));
    if (it == entries_.end()) throw FileError(path_, "missing blob " + name);
    return it->second;
  }
  UniqueFd fd_;
  std::string path_;
  std::map<std::string, std::pair<uint64_t, uint64_t>> entries_;
  std::map<std::string, std::string> aliases_;
};

class TarEntryReader : public Reader {
 public:
  explicit TarEntryReader(TarReader& t) : t_(t) {}
  size_t read(void* buf, size_t n) override { return t_.read(buf, n); }

 private:
  TarReader& t_;
};

// Replays bytes already read from a stream, then goes on reading it.
class PrefixedReader : public Reader {
 public:
  PrefixedReader(std::string prefix, Reader& rest) : prefix_(std::move(prefix)), rest_(rest) {}
  size_t read(void* buf, size_t n) override {
    if (at_ < prefix_.size()) {
      size_t k = std::min(n, prefix_.size() - at_);
      std::memcpy(buf, prefix_.data() + at_, k);
      at_ += k;
      return k;
    }
    return rest_.read(buf, n);
  }

 private:
  std::string prefix_;
  size_t at_ = 0;
  Reader& rest_;
};

// A tar archive from a stream (standard input, a compressed archive): one
// pass. JSON entries (manifests, indexes, configs) are kept; every other
// blob is summarised as a layer as it passes, since it cannot be re-read,
// whatever its size. The manifest may come last, so a blob is not known to
// be a layer until the end: one that is not a readable layer (an attestation,
// a signature) keeps its error, which counts only if a manifest lists it.
class StreamStore : public Store {
 public:
  StreamStore(Reader& in, std::string name, const LayerLimits& limits) : name_(std::move(name)) {
    TarReader tar(in, name_);
    TarEntry e;
    uint64_t kept = 0;
    for (size_t count = 0; tar.next(e);) {
      if (++count > kMaxArchiveEntries) throw too_many_entries(name_);
      std::string n = clean_name(e.name);
      if (e.type == '2') aliases_[n] = clean_name(dirname_of("/" + n).substr(1) + "/" + e.linkname);
      if (e.type == '1') aliases_[n] = clean_name(e.linkname);
      if (e.type != '0' && e.type != '7') continue;
      TarEntryReader r(tar);
      std::string head(static_cast<size_t>(std::min<uint64_t>(e.size, 512)), '\0');
      r.read_exact(head.data(), head.size(), name_ + ":" + n);
      if (e.size <= kMaxJson && looks_like_json(head)) {
        kept += e.size;
        if (kept > kMaxKeptSmall)
          throw FileError(name_, "more than " + std::to_string(kMaxKeptSmall >> 20) +
                                     " MiB of manifests and configs in a stream; save the archive to a file");
        size_t have = head.size();
        std::string bytes = std::move(head);
        bytes.resize(static_cast<size_t>(e.size));
        r.read_exact(bytes.data() + have, bytes.size() - have, name_ + ":" + n);
        small_[n] = std::move(bytes);
        summaries_.erase(n);
        failed_.erase(n);
        continue;
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
  static bool looks_like_json(const std::string& head) {
    size_t i = head.find_first_not_of(" \t\r\n");
    return i != std::string::npos && (head[i] == '{' || head[i] == '[');
  }
  std::string resolve(const std::string& n) const { return follow_aliases(aliases_, n); }
  std::string name_;
  std::map<std::string, std::string> small_, aliases_;
  std::map<std::string, LayerSummary> summaries_;
  std::set<std::string> taken_;  // summaries handed over
  std::map<std::string, std::exception_ptr> failed_;  // blob -> why it is not a readable layer
};

// An OCI image layout directory; names resolve inside it, never outside.
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
    int fd = open_blob(name);
    struct stat st;
    fstat(fd, &st);
    if (static_cast<uint64_t>(st.st_size) > kMaxJson) {
      ::close(fd);
      throw FileError(dir_ + "/" + name, "too large for a manifest or config");
    }
    std::string out(static_cast<size_t>(st.st_size), '\0');
    FdReader r(fd, dir_ + "/" + name, 0, out.size());
    try {
      r.read_exact(out.data(), out.size(), dir_ + "/" + name);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    return out;
  }
  LayerSummary summarize(const std::string& name, const LayerLimits& limits) override {
    int fd = open_blob(name);
    struct stat st;
    fstat(fd, &st);
    FdReader r(fd, dir_ + "/" + name, 0, static_cast<uint64_t>(st.st_size));
    try {
      LayerSummary s = summarize_layer(r, dir_ + "/" + name, limits);
      ::close(fd);
      return s;
    } catch (...) {
      ::close(fd);
      throw;
    }
  }

 private:
  int open_blob(const std::string& name) const {
    auto r = resolve(tree_, "/" + clean_name(name));
    if (!r || r->node.kind != FsNode::Kind::Regular) throw FileError(dir_, "missing blob " + name);
    int fd = tree_.open_file(r->path);
    if (fd < 0) throw FileError(dir_ + "/" + name, std::string("cannot open: ") + std::strerror(errno));
    return fd;
  }
  std::string dir_;
  HostTree tree_;
};

// ---- manifests -------------------------------------------------------------

struct Candidate {
  Platform platform;
  std::string reference;  // manifest digest or repo tag
  std::string config;     // blob name
  std::vector<std::string> layers;
  std::vector<std::string> layer_digests;  // expected sha256 hex of each stored blob, "" when unknown
  std::string format;
};

std::string read_verified(Store& s, const std::string& digest, const std::string& where) {
  std::string name = blob_name(digest, where);
  std::string bytes = s.read_small(name);
  std::string want = digest.substr(7);
  if (sha256_hex(bytes) != want) throw FileError(s.source() + ":" + name, "digest mismatch: content does not hash to " + digest);
  return bytes;
}

bool is_attestation(const json& desc) {
  auto a = desc.find("annotations");
  if (a != desc.end() && a->is_object() && str_or(*a, "vnd.docker.reference.type") == "attestation-manifest") return true;
  auto p = desc.find("platform");
  return p != desc.end() && p->is_object() && str_or(*p, "os") == "unknown";
}

// Each manifest or index is read once however often indexes list it (an
// index may list one child thousands of times, at every level), and the
// descriptors read in all are capped.
struct IndexWalk {
  std::set<std::string> seen;  // digests already read
  size_t descriptors = 0;
};

void collect_oci(Store& s, const json& index, const std::string& where, int depth, std::vector<Candidate>& out,
                 const std::string& format, IndexWalk& walk) {
  if (depth > kMaxIndexDepth) throw FileError(where, "image indexes nested too deeply");
  auto m = index.find("manifests");
  if (m == index.end() || !m->is_array()) throw FileError(where, "index has no \"manifests\" array");
  for (const auto& desc : *m) {
    if (!desc.is_object()) throw FileError(where, "malformed descriptor in \"manifests\"");
    if (++walk.descriptors > kMaxDescriptors)
      throw FileError(where, "indexes list more than " + std::to_string(kMaxDescriptors) + " manifests (memprofile's limit)");
    if (is_attestation(desc)) continue;
    std::string digest = str_or(desc, "digest");
    if (!walk.seen.insert(digest).second) continue;
    std::string media = str_or(desc, "mediaType");
    std::string text = read_verified(s, digest, where);
    json j = parse_json(text, s.source() + ":" + blob_name(digest, where));
    bool nested = media.find("index") != std::string::npos || media.find("manifest.list") != std::string::npos ||
                  (j.is_object() && j.contains("manifests"));
    if (nested) {
      collect_oci(s, j, s.source() + ":" + blob_name(digest, where), depth + 1, out, format, walk);
      continue;
    }
    Candidate c;
    c.format = format;
    c.reference = digest;
    if (auto p = desc.find("platform"); p != desc.end() && p->is_object())
      c.platform = {str_or(*p, "os"), str_or(*p, "architecture"), str_or(*p, "variant")};
    auto cfg = j.find("config");
    if (cfg == j.end() || !cfg->is_object()) throw FileError(s.source() + ":" + blob_name(digest, where), "manifest has no config");
    c.config = blob_name(str_or(*cfg, "digest"), where);
    auto layers = j.find("layers");
    if (layers == j.end() || !layers->is_array()) throw FileError(s.source() + ":" + blob_name(digest, where), "manifest has no layers");
    for (const auto& l : *layers) {
      std::string d = l.is_object() ? str_or(l, "digest") : "";
      c.layers.push_back(blob_name(d, where));
      c.layer_digests.push_back(d.substr(7));
    }
    out.push_back(std::move(c));
  }
}

std::vector<Candidate> collect_docker(Store& s) {
  std::string where = s.source() + ":manifest.json";
  json j = parse_json(s.read_small("manifest.json"), where);
  if (!j.is_array()) throw FileError(where, "expected an array of images");
  if (j.size() > kMaxDescriptors)
    throw FileError(where, "lists more than " + std::to_string(kMaxDescriptors) + " images (memprofile's limit)");
  std::vector<Candidate> out;
  for (const auto& img : j) {
    if (!img.is_object()) throw FileError(where, "malformed image entry");
    Candidate c;
    c.format = "docker-archive";
    c.config = clean_name(str_or(img, "Config"));
    if (c.config.empty()) throw FileError(where, "image entry has no Config");
    auto tags = img.find("RepoTags");
    if (tags != img.end() && tags->is_array() && !tags->empty() && (*tags)[0].is_string()) c.reference = (*tags)[0];
    for (const auto& l : str_list(img, "Layers", where)) {
      c.layers.push_back(clean_name(l));
      // Docker >= 25 names layers by blob digest: check those too.
      c.layer_digests.push_back(l.rfind("blobs/sha256/", 0) == 0 ? l.substr(13) : "");
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Candidate> collect(Store& s) {
  bool has_index = s.has("index.json"), has_docker = s.has("manifest.json");
  if (!has_index && !has_docker)
    throw FileError(s.source(), "not an image archive: no index.json (OCI) or manifest.json (docker save)");
  if (!has_index) return collect_docker(s);
  std::string where = s.source() + ":index.json";
  std::vector<Candidate> oci;
  IndexWalk walk;
  collect_oci(s, parse_json(s.read_small("index.json"), where), where, 0, oci,
              has_docker ? "docker-archive" : "oci-archive", walk);
  if (!has_docker) return oci;
  // Docker >= 25 writes both. Its manifest.json may list layers that the OCI
  // manifest's blobs lack (moby#47065): prefer whichever is complete.
  std::vector<Candidate> docker = collect_docker(s);
  for (auto& c : oci) {
    bool complete = std::all_of(c.layers.begin(), c.layers.end(), [&](const std::string& l) { return s.has(l); });
    if (complete) continue;
    for (const auto& d : docker)
      if (d.config == c.config && std::all_of(d.layers.begin(), d.layers.end(), [&](const std::string& l) { return s.has(l); })) {
        Platform keep = c.platform;
        std::string ref = c.reference;
        c = d;
        c.platform = keep;
        c.reference = ref;
      }
  }
  return oci;
}

}  // namespace

// ---- public ------------------------------------------------------------------

std::string Platform::str() const {
  std::string s = (os.empty() ? "?" : os) + "/" + (architecture.empty() ? "?" : architecture);
  if (!variant.empty()) s += "/" + variant;
  return s;
}

Platform Platform::parse(const std::string& s) {
  Platform p;
  size_t a = s.find('/');
  if (a == std::string::npos) throw Error("--platform must look like os/arch[/variant], e.g. linux/arm64");
  p.os = s.substr(0, a);
  size_t b = s.find('/', a + 1);
  p.architecture = s.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
  if (b != std::string::npos) p.variant = s.substr(b + 1);
  if (p.os.empty() || p.architecture.empty()) throw Error("--platform must look like os/arch[/variant], e.g. linux/arm64");
  return p;
}

Platform Platform::host() {
#if defined(__x86_64__)
  return {"linux", "amd64", ""};
#elif defined(__aarch64__)
  return {"linux", "arm64", ""};
#else
  return {"linux", "", ""};
#endif
}

bool Platform::matches(const Platform& want) const {
  auto variant_of = [](const Platform& p) { return p.architecture == "arm64" && p.variant.empty() ? "v8" : p.variant; };
  return (want.os.empty() || want.os == os) && (want.architecture.empty() || want.architecture == architecture) &&
         (want.variant.empty() || variant_of(want) == variant_of(*this));
}

std::string ImageConfig::env_value(const std::string& key, bool* present) const {
  std::string value;
  bool found = false;
  for (const auto& e : env)
    if (e.compare(0, key.size() + 1, key + "=") == 0) {
      value = e.substr(key.size() + 1);
      found = true;
    }
  if (present) *present = found;
  return value;
}

ImageConfig parse_image_config(const std::string& text, const std::string& name) {
  json j = parse_json(text, name);
  if (!j.is_object()) throw FileError(name, "malformed JSON: image config is not an object");
  ImageConfig c;
  c.platform = {str_or(j, "os"), str_or(j, "architecture"), str_or(j, "variant")};
  auto cfg = j.find("config");
  if (cfg != j.end() && cfg->is_object()) {
    c.entrypoint = str_list(*cfg, "Entrypoint", name);
    c.cmd = str_list(*cfg, "Cmd", name);
    c.env = str_list(*cfg, "Env", name);
    c.user = str_or(*cfg, "User");
    c.working_dir = str_or(*cfg, "WorkingDir");
  }
  auto rootfs = j.find("rootfs");
  if (rootfs != j.end() && rootfs->is_object()) c.diff_ids = str_list(*rootfs, "diff_ids", name);
  return c;
}

std::vector<LoadedImage> load_images(const std::string& source, const ImageLoadOptions& opts) {
  std::unique_ptr<Store> store;
  std::unique_ptr<Reader> raw, unpacked;  // kept alive for stream stores
  std::string kind;
  if (is_registry_source(source)) {
#ifdef MEMPROFILE_NO_REGISTRY
    throw FileError(source, "this memprofile (the static binary) is built without registry access; use the "
                            "dynamically linked memprofile, or copy the image to an archive first (skopeo copy)");
#else
    store = open_registry(source, opts.registry);
    kind = "registry";
#endif
  } else if (is_daemon_source(source)) {
#ifdef MEMPROFILE_NO_REGISTRY
    throw FileError(source, "this memprofile (the static binary) is built without the Docker daemon source; use the "
                            "dynamically linked memprofile, or `docker save` the image to a file first");
#else
    raw = open_daemon_image(source);
    store = std::make_unique<StreamStore>(*raw, source, opts.limits);
#endif
  } else if (source == "-") {
    raw = std::make_unique<FdReader>(0, "stdin");
    unpacked = decompress(*raw, "stdin", opts.limits.max_tar_bytes);
    store = std::make_unique<StreamStore>(*unpacked, "stdin", opts.limits);
  } else {
    struct stat st;
    if (stat(source.c_str(), &st) != 0) throw FileError(source, std::string("cannot open: ") + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) {
      HostTree probe(source);
      auto r = resolve(probe, "/oci-layout");
      if (!r || r->node.kind != FsNode::Kind::Regular)
        throw FileError(source, "a directory but not an OCI image layout (no oci-layout file); for a plain root "
                                "filesystem use --rootfs");
      store = std::make_unique<DirStore>(source);
      kind = "oci-layout";
    } else {
      UniqueFd fd(::open(source.c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd) throw FileError(source, std::string("cannot open: ") + std::strerror(errno));
      unsigned char head[4] = {0, 0, 0, 0};
      ssize_t got = pread(fd.get(), head, sizeof head, 0);
      bool compressed = got >= 2 && ((head[0] == 0x1f && head[1] == 0x8b) || (got == 4 && head[0] == 0x28 && head[1] == 0xb5));
      if (got <= 0) throw FileError(source, "empty file");
      if (compressed) {
        // Read to the end here: the fd closes when this block ends.
        raw = std::make_unique<FdReader>(fd.get(), source);
        unpacked = decompress(*raw, source, opts.limits.max_tar_bytes);
        store = std::make_unique<StreamStore>(*unpacked, source, opts.limits);
      } else {
        store = std::make_unique<TarFileStore>(std::move(fd), source);
      }
    }
  }

  std::vector<Candidate> all = collect(*store);
  if (!kind.empty())
    for (auto& c : all) c.format = kind;
  // Fill in platforms from configs where the index did not say.
  std::vector<ImageConfig> configs(all.size());
  std::map<std::string, ImageConfig> parsed;  // each config blob read and parsed once
  for (size_t i = 0; i < all.size(); ++i) {
    auto known = parsed.find(all[i].config);
    if (known == parsed.end()) {
      std::string where = store->source() + ":" + all[i].config;
      std::string text = store->read_small(all[i].config);
      if (all[i].config.rfind("blobs/sha256/", 0) == 0 && sha256_hex(text) != all[i].config.substr(13))
        throw FileError(where, "digest mismatch: config does not hash to its name");
      known = parsed.emplace(all[i].config, parse_image_config(text, where)).first;
    }
    configs[i] = known->second;
    if (all[i].platform.architecture.empty()) all[i].platform = configs[i].platform;
  }
  std::string platforms;  // made once: it is quoted for every image chosen
  for (const auto& c : all) platforms += (platforms.empty() ? "" : ", ") + c.platform.str();
  if (all.empty()) throw FileError(source, "holds no image");
  std::vector<size_t> chosen;
  if (opts.all_platforms) {
    for (size_t i = 0; i < all.size(); ++i) chosen.push_back(i);
  } else if (!opts.platform.empty()) {
    Platform want = Platform::parse(opts.platform);
    for (size_t i = 0; i < all.size() && chosen.empty(); ++i)
      if (all[i].platform.matches(want)) chosen.push_back(i);
    if (chosen.empty()) throw FileError(source, "no image for platform " + opts.platform + " (it has: " + platforms + ")");
  } else if (all.size() == 1) {
    chosen.push_back(0);
  } else {
    for (size_t i = 0; i < all.size() && chosen.empty(); ++i)
      if (all[i].platform.matches(Platform::host())) chosen.push_back(i);
    if (chosen.empty())
      throw FileError(source, "holds several platforms (" + platforms + ") and none is this machine's " +
                                  Platform::host().str() + "; pick one with --platform or use --all-platforms");
  }

  // A blob shared by several chosen images (--all-platforms) is decoded
  // once; its summary is kept only until its last listing is applied.
  std::map<std::string, size_t> uses_left;
  for (size_t idx : chosen)
    for (const auto& l : all[idx].layers) ++uses_left[l];
  std::map<std::string, LayerSummary> decoded;

  std::vector<LoadedImage> images;
  for (size_t idx : chosen) {
    const Candidate& c = all[idx];
    LoadedImage img;
    img.source = source;
    img.format = c.format;
    img.reference = c.reference;
    img.config = configs[idx];
    if (all.size() > 1)
      img.notes.push_back("platform " + c.platform.str() + " of " +
                          (all.size() <= 16 ? platforms : std::to_string(all.size()) + " images"));
    if (!img.config.diff_ids.empty() && img.config.diff_ids.size() != c.layers.size())
      throw FileError(source, "config lists " + std::to_string(img.config.diff_ids.size()) + " diff_ids but the manifest " +
                                  std::to_string(c.layers.size()) + " layers");
    if (c.layers.size() > kMaxLayers)
      throw FileError(source, "manifest lists " + std::to_string(c.layers.size()) + " layers; memprofile reads at most " +
                                  std::to_string(kMaxLayers));
    for (const auto& l : c.layers)
      if (!store->has(l)) throw FileError(source, "layer blob " + l + " is missing from the archive");

    // A blob listed several times is decoded once; its summary is applied at
    // each place it is listed.
    std::vector<std::string> blobs;  // still to decode
    for (const auto& l : c.layers)
      if (!decoded.count(l) && std::find(blobs.begin(), blobs.end(), l) == blobs.end()) blobs.push_back(l);
    std::vector<LayerSummary> summaries(blobs.size());
    std::vector<std::exception_ptr> errors(blobs.size());
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    auto work = [&] {
      // The first fatal error stops the pool: no worker starts another layer.
      for (size_t i; !failed.load() && (i = next.fetch_add(1)) < blobs.size();) {
        try {
          summaries[i] = store->summarize(blobs[i], opts.limits);
        } catch (...) {
          errors[i] = std::current_exception();
          failed = true;
        }
      }
    };
    unsigned jobs = store->parallel() ? (opts.jobs ? opts.jobs : std::max(1u, std::thread::hardware_concurrency())) : 1;
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < std::min<size_t>(jobs, blobs.size()); ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    for (size_t b = 0; b < blobs.size(); ++b) decoded.emplace(blobs[b], std::move(summaries[b]));

    auto tree = std::make_shared<ImageTree>(opts.limits.budget);
    for (size_t i = 0; i < c.layers.size(); ++i) {
      auto at = decoded.find(c.layers[i]);
      const LayerSummary& s = at->second;
      if (!c.layer_digests[i].empty() && s.blob_sha256 != c.layer_digests[i])
        throw FileError(s.name, "digest mismatch: layer does not hash to sha256:" + c.layer_digests[i]);
      if (i < img.config.diff_ids.size() && img.config.diff_ids[i] != "sha256:" + s.diff_id)
        throw FileError(s.name, "diff_id mismatch: uncompressed layer is sha256:" + s.diff_id + ", config says " +
                                    img.config.diff_ids[i]);
      img.layer_bytes += s.tar_bytes;
      // The last listing of a blob gives its summary away; earlier ones copy.
      if (--uses_left[c.layers[i]] == 0) {
        LayerSummary last = std::move(at->second);
        decoded.erase(at);
        tree->apply(std::move(last));
      } else {
        tree->apply(LayerSummary(s));
      }
    }
    img.layers = c.layers.size();
    img.anomalies = tree->anomalies();
    img.tree = tree;
    images.push_back(std::move(img));
  }
  return images;
}

}  // namespace memprofile
