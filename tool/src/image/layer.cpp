#include "image/layer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <set>

#include "base/error.h"
#include "image/file_tree.h"
#include "base/tar_reader.h"
#include "elf/layout.h"

namespace memprofile {

namespace {

constexpr size_t kChunk = 256 << 10;
constexpr size_t kHead = 64 << 10;          // where ELF and program headers live
constexpr uint64_t kPrefix = 1 << 20;       // always kept: dynamic tables of most layouts
constexpr uint64_t kElfBudget = 8 << 20;    // most bytes kept for one ELF file
constexpr uint64_t kMaxElfSize = 4ull << 30;
constexpr size_t kConfigMax = 4 << 20;
constexpr size_t kScriptHead = 256;
constexpr size_t kVenvConfigMax = 4096;  // a venv's pyvenv.cfg: a few short lines
constexpr size_t kPathStringsMax = 64 << 10;
// What one layer may keep of file contents (config files, script heads, path
// strings of executables) in all: a layer of many crafted files must not
// hold gigabytes. Real layers keep well under 1 MiB.
constexpr uint64_t kKeptBudget = 16 << 20;
// Anomalies listed one by one per layer; the rest are counted.
constexpr size_t kMaxAnomalies = 64;
// What the parsed facts of one ELF file hold on the heap, charged to the
// run's budget: one file's lists are bounded by the ELF reader, but many
// entries may name one long string, and an image may hold many such files.
uint64_t facts_bytes(const ElfInfo& e) {
  auto str = [](const std::string& v) { return sizeof(std::string) + (v.size() > 15 ? v.size() + 1 : 0); };
  uint64_t n = sizeof(FileFacts) + sizeof(ElfInfo) + str(e.interpreter) + str(e.soname) + str(e.rpath) +
               str(e.runpath) + str(e.go_version);
  for (const auto& v : e.needed) n += str(v);
  for (const auto& v : e.verdef) n += str(v);
  for (const auto& v : e.heap.imports) n += str(v);
  for (const auto& v : e.heap.defines) n += str(v);
  for (const auto& v : e.heap.weak_imports) n += str(v);
  n += str(e.heap.carried_by_strings);
  n += str(e.heap.jemalloc_conf_env);
  for (const auto& vn : e.verneed) {
    n += sizeof(VersionNeed) + str(vn.file);
    for (const auto& v : vn.versions) n += str(v);
  }
  return n;
}

// Keeps the parts of an ELF file that the reader will look at, as the file
// streams past: the start (headers, dynamic tables of most layouts), then,
// once the program headers are known, PT_DYNAMIC, PT_INTERP, PT_NOTE, the
// start of the first writable segment (Go's build info) and the read-only
// segments, within a budget. They are copied straight into a sparse,
// file-sized anonymous mapping: untouched pages cost no memory, so only the
// kept bytes do. The rest is never stored.
class ElfCapture {
 public:
  explicit ElfCapture(uint64_t size) : size_(size) {}
  ~ElfCapture() { unmap(); }
  ElfCapture(const ElfCapture&) = delete;
  ElfCapture& operator=(const ElfCapture&) = delete;

  void feed(const char* p, size_t n) {
    uint64_t start = pos_;
    pos_ += n;
    if (!planned_) {
      size_t take = static_cast<size_t>(std::min<uint64_t>(n, kHead - std::min<uint64_t>(head_.size(), kHead)));
      head_.append(p, take);
      if (head_.size() >= std::min<uint64_t>(size_, kHead)) plan();
    }
    if (!map_) return;
    for (const auto& r : ranges_) {
      uint64_t lo = std::max(start, r.first), hi = std::min(pos_, r.second);
      if (lo < hi) std::memcpy(map_ + lo, p + (lo - start), static_cast<size_t>(hi - lo));
    }
  }

  std::shared_ptr<const ElfInfo> finish(const std::string& name) {
    if (!planned_) plan();
    if (!map_) throw FileError(name, "ELF file too large to summarise");
    forget_section_headers(map_, static_cast<size_t>(size_));  // sections are never read from a capture
    auto info = std::make_shared<ElfInfo>(read_elf_buffer(map_, static_cast<size_t>(size_), name, false));
    unmap();
    return info;
  }

 private:
  void unmap() {
    if (map_) munmap(map_, map_len_);
    map_ = nullptr;
  }

  void want(uint64_t from, uint64_t len) {
    if (from >= size_ || len == 0) return;
    uint64_t to = std::min(size_, from + std::min<uint64_t>(len, kElfBudget));
    for (const auto& r : ranges_)
      if (from >= r.first && to <= r.second) return;
    if (budget_used_ + (to - from) > kElfBudget) return;
    budget_used_ += to - from;
    ranges_.push_back({from, to});
  }

  void plan() {
    planned_ = true;
    if (size_ == 0 || size_ > kMaxElfSize) return;
    map_len_ = static_cast<size_t>(size_);
    void* m = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return;
    map_ = static_cast<char*>(m);
    // Everything streamed so far is in the head.
    std::memcpy(map_, head_.data(), std::min<size_t>(head_.size(), map_len_));
    want(0, kPrefix);
    for (const FileRange& r : ranges_read(map_, std::min<size_t>(head_.size(), map_len_))) want(r.offset, r.length);
    // Bytes of wanted ranges beyond the head that arrived in the current
    // chunk are copied by feed() right after this.
    head_.clear();
    head_.shrink_to_fit();
  }

  uint64_t size_, pos_ = 0, budget_used_ = 0;
  bool planned_ = false;
  std::string head_;
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;
  char* map_ = nullptr;
  size_t map_len_ = 0;
};

// Collects runs of path characters that start with '/', such as
// "/bin/numaflow-rs". Rust packs string literals without separators, so a
// run may hold several paths; matching is done later by substring.
class PathStrings {
 public:
  void feed(const char* p, size_t n) {
    static const auto table = [] {
      std::array<bool, 256> t{};
      for (int c = 0; c < 256; ++c) t[c] = std::isalnum(c) || c == '/' || c == '_' || c == '-' || c == '.' || c == '+';
      return t;
    }();
    size_t i = 0;
    while (i < n) {
      if (run_.empty()) {
        // Outside a run only a '/' can start one: jump to it.
        const void* slash = std::memchr(p + i, '/', n - i);
        if (!slash) return;
        i = static_cast<size_t>(static_cast<const char*>(slash) - p);
      }
      size_t j = i;
      while (j < n && table[static_cast<unsigned char>(p[j])]) ++j;
      if (run_.size() < 255) run_.append(p + i, std::min(j - i, 255 - run_.size()));
      if (j < n) flush();  // the run ended inside this chunk
      i = j + (j < n);
    }
  }
  std::shared_ptr<const std::string> finish() {
    flush();
    if (out_.empty()) return nullptr;
    return std::make_shared<const std::string>(std::move(out_));
  }

 private:
  void flush() {
    if (run_.size() >= 4 && std::count(run_.begin(), run_.end(), '/') >= 2 && out_.size() + run_.size() < kPathStringsMax &&
        seen_.insert(run_).second) {
      out_ += run_;
      out_ += '\n';
    }
    run_.clear();
  }
  std::string run_, out_;
  std::set<std::string> seen_;
};

std::string note(const TarEntry& e, const std::string& what) {
  return "entry '" + e.name + "' (offset " + std::to_string(e.offset) + "): " + what;
}

// "./usr/../bin//x" -> "/bin/x"; nullopt-like "" when it climbs out of the root.
std::string clean_entry_path(const std::string& raw, bool* escaped) {
  std::vector<std::string> parts;
  size_t i = 0;
  *escaped = false;
  while (i <= raw.size()) {
    size_t j = raw.find('/', i);
    if (j == std::string::npos) j = raw.size();
    std::string c = raw.substr(i, j - i);
    i = j + 1;
    if (c.empty() || c == ".") continue;
    if (c == "..") {
      if (parts.empty()) {
        *escaped = true;
        return "";
      }
      parts.pop_back();
      continue;
    }
    parts.push_back(c);
  }
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

// Extracting a tar that lists a path twice leaves the later entry, where the
// earlier one was; whiteout and opaque markers count once each. Done once
// at the end with a sort, not with a map holding a second copy of every
// name as the entries arrive.
template <typename Note>
void keep_last_of_each_path(LayerSummary& s, Note&& anomaly) {
  auto group = [](LayerNode::Kind k) {
    return k == LayerNode::Kind::Whiteout ? 1 : k == LayerNode::Kind::Opaque ? 2 : 0;
  };
  std::vector<uint32_t> order(s.nodes.size());  // < kMaxLayerEntries
  std::iota(order.begin(), order.end(), 0);
  // The nodes by index, looked up once: a deque's operator[] in every
  // comparison of the sort cost more than the comparison itself.
  std::vector<const LayerNode*> at(s.nodes.size());
  for (size_t i = 0; i < at.size(); ++i) at[i] = &s.nodes[i];
  auto key = [&](uint32_t i) { return std::make_pair(group(at[i]->kind), at[i]->path); };
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
  std::vector<bool> drop(s.nodes.size());
  size_t repeated = 0;
  std::string example;
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    while (j < order.size() && key(order[j]) == key(order[i])) ++j;
    if (j - i > 1) {
      if (group(s.nodes[order[i]].kind) == 0) {
        if (repeated++ == 0) example = std::string(s.nodes[order[i]].path);
        s.nodes[order[i]] = std::move(s.nodes[order[j - 1]]);
      }
      for (size_t k = i + 1; k < j; ++k) drop[order[k]] = true;
    }
    i = j;
  }
  size_t out = 0;
  for (size_t i = 0; i < s.nodes.size(); ++i)
    if (!drop[i]) s.nodes[out++] = std::move(s.nodes[i]);
  s.held.give_back((s.nodes.size() - out) * sizeof(LayerNode));
  s.nodes.resize(out);
  s.nodes.shrink_to_fit();
  if (repeated)
    anomaly(std::to_string(repeated) + " path" + (repeated == 1 ? "" : "s") + " listed more than once (e.g. " + example +
            "): the last entry of each wins, as extracting the layer would");
}

// A memfd for a file the run keeps whole (Capture), or none: not asked
// for, or past the run's allowance (said as an anomaly).
template <typename Anomaly>
UniqueFd capture_file(const LayerLimits& limits, const std::string& path, uint64_t size, const std::string& layer,
                      Anomaly& anomaly) {
  if (!limits.capture || !limits.capture->wants(path)) return UniqueFd();
  if (!limits.capture->take(size)) {
    anomaly(path + ": not kept whole: the run's " + std::to_string(Capture::kMaxBytes >> 30) +
            " GiB for whole files is spent");
    return UniqueFd();
  }
  UniqueFd fd(memfd_create("memprofile-file", MFD_CLOEXEC));
  if (!fd) throw FileError(layer, std::string("cannot keep ") + path + ": memfd_create: " + std::strerror(errno));
  return fd;
}

void write_all(int fd, const char* data, size_t n, const std::string& what) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw FileError(what, std::string("cannot keep the file in memory: ") + std::strerror(errno));
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::shared_ptr<const std::string> scan_path_strings(Reader& in) {
  PathStrings strings;
  std::vector<char> buf(kChunk);
  for (size_t r; (r = in.read(buf.data(), buf.size())) > 0;) strings.feed(buf.data(), r);
  return strings.finish();
}

bool is_config_file(const std::string& path) {
  return path == "/etc/passwd" || path == "/etc/group" || path == "/etc/ld.so.cache" || path == "/etc/os-release" ||
         path == "/usr/lib/os-release" || (path.rfind("/etc/ld-musl-", 0) == 0 && path.size() > 18 &&
                                           path.compare(path.size() - 5, 5, ".path") == 0) ||
         path.rfind("/etc/memprofile/", 0) == 0 || path == "/var/lib/dpkg/status" ||
         // image/debian.h: what the memray image build installs; not the
         // file lists beside distroless' stanzas, which would spend the
         // layer's budget for contents.
         (path.rfind("/var/lib/dpkg/status.d/", 0) == 0 && path.size() > 8 &&
          path.compare(path.size() - 8, 8, ".md5sums") != 0);
}

namespace {

// One layer's pass, one member per step: each entry is checked (its name),
// classified (whiteouts, then its type) and, for a regular file, read
// (ELF facts, kept heads and configs, a whole copy when asked); at the end
// repeated paths are settled and the digests taken.
class LayerPass {
 public:
  LayerPass(TarReader& tar, const std::string& name, const LayerLimits& limits, LayerSummary& s)
      : tar_(tar), name_(name), limits_(limits), s_(s), buf_(kChunk) {
    s_.held = Charge(limits.budget);
  }

  void run() {
    TarEntry e;
    while (tar_.next(e)) {
      if (++s_.entries > kMaxLayerEntries)
        throw FileError(name_, "layer holds more than " + std::to_string(kMaxLayerEntries) + " entries (memprofile's limit)");
      std::string path;
      if (!usable_path(e, path)) continue;
      LayerNode n;
      n.mode = e.mode;
      n.uid = e.uid;
      n.gid = e.gid;
      n.size = e.size;
      n.file_caps = e.file_caps;
      if (whiteout(e, path, n)) continue;
      if (!classify(e, path, n)) continue;
      n.path = keep_name(path);
      if (n.kind == LayerNode::Kind::File) read_file(e, path, n);
      keep_node(std::move(n));
    }
    keep_last_of_each_path(s_, [this](std::string what) { anomaly(std::move(what)); });
    if (more_anomalies_) s_.anomalies.push_back("... and " + std::to_string(more_anomalies_) + " more");
    if (specials_)
      s_.anomalies.push_back(std::to_string(specials_) + " device node" + (specials_ == 1 ? "" : "s") + " or FIFO" +
                             (specials_ == 1 ? "" : "s") + " (e.g. " + first_special_ + "): recorded, never opened");
  }

  std::vector<char>& buffer() { return buf_; }

 private:
  // Every name and node is charged to the run's budget as it is kept.
  std::string_view keep_name(std::string_view text) {
    uint64_t before = s_.names->bytes();
    std::string_view kept = s_.names->add(text);
    if (s_.names->bytes() != before) s_.held.add(s_.names->bytes() - before, name_, "the layers' file names");
    return kept;
  }
  void keep_node(LayerNode&& n) {
    s_.held.add(sizeof(LayerNode), name_, "the layers' file lists");
    s_.nodes.push_back(std::move(n));
  }
  void anomaly(std::string what) {
    if (s_.anomalies.size() < kMaxAnomalies) s_.anomalies.push_back(std::move(what));
    else ++more_anomalies_;
  }

  // The entry's path in the image, or false for one that is ignored (too
  // long or deep, climbing out of the root, the root itself).
  bool usable_path(const TarEntry& e, std::string& path) {
    if (e.name.size() > kMaxEntryName || e.linkname.size() > kMaxEntryName ||
        std::count(e.name.begin(), e.name.end(), '/') > static_cast<std::ptrdiff_t>(kMaxEntryDepth)) {
      anomaly("entry at offset " + std::to_string(e.offset) + ": name or link target longer than " +
              std::to_string(kMaxEntryName) + " bytes (PATH_MAX) or deeper than " + std::to_string(kMaxEntryDepth) +
              " directories; ignored");
      return false;
    }
    bool escaped = false;
    if (!e.name.empty() && e.name[0] == '/') anomaly(note(e, "absolute path, taken relative to the image root"));
    path = clean_entry_path(e.name, &escaped);
    if (escaped) {
      anomaly(note(e, "path climbs out of the image root with '..'; ignored"));
      return false;
    }
    return path != "/";  // the root directory itself
  }

  // An opaque marker or a whiteout: kept (or ignored with a note), true.
  bool whiteout(const TarEntry& e, const std::string& path, LayerNode& n) {
    std::string dir = dirname_of(path), base = path.substr(path.rfind('/') + 1);
    if (base == ".wh..wh..opq") {
      n.kind = LayerNode::Kind::Opaque;
      n.path = keep_name(dir);
      keep_node(std::move(n));
      return true;
    }
    if (base.rfind(".wh.", 0) != 0) return false;
    n.kind = LayerNode::Kind::Whiteout;
    if (base.size() == 4) {
      anomaly(note(e, "whiteout with an empty name; ignored"));
      return true;
    }
    n.path = keep_name((dir == "/" ? "" : dir) + "/" + base.substr(4));
    keep_node(std::move(n));
    return true;
  }

  // The node's kind from the entry's type; false for one that is ignored.
  bool classify(const TarEntry& e, const std::string& path, LayerNode& n) {
    switch (e.type) {
      case '0':
      case '7':
      case 'S':
        n.kind = LayerNode::Kind::File;
        return true;
      case '1': {
        n.kind = LayerNode::Kind::Hardlink;
        bool esc = false;
        std::string target = clean_entry_path(e.linkname, &esc);
        if (esc || e.linkname.empty()) {
          anomaly(note(e, "hard link to '" + e.linkname + "' escapes the image root; ignored"));
          return false;
        }
        n.link = keep_name(target);
        return true;
      }
      case '2':
        n.kind = LayerNode::Kind::Symlink;
        n.link = keep_name(e.linkname);
        return true;
      case '5':
        n.kind = LayerNode::Kind::Dir;
        return true;
      case '3':
      case '4':
      case '6':
        n.kind = LayerNode::Kind::Other;
        if (specials_++ == 0) first_special_ = path;
        return true;
      default:
        anomaly(note(e, std::string("unknown entry type '") + e.type + "'; ignored"));
        return false;
    }
  }

  // Within the layer's budget for kept contents; past it, said once.
  bool affordable(const TarEntry& e, size_t bytes) {
    if (kept_bytes_ + bytes <= kKeptBudget) {
      s_.held.add(bytes, name_, "the layers' kept file contents");
      kept_bytes_ += bytes;
      return true;
    }
    if (!budget_noted_)
      anomaly(note(e, "the layer's budget for kept file contents (" + std::to_string(kKeptBudget >> 20) +
                          " MiB) is spent; contents of this and later files are not kept"));
    budget_noted_ = true;
    return false;
  }

  // A regular file's content as it streams past: ELF facts, the head of a
  // script or executable, a config file whole, a whole copy when asked.
  void read_file(const TarEntry& e, const std::string& path, LayerNode& n) {
    Charge reading(limits_.budget);
    std::unique_ptr<ElfCapture> elf;
    std::unique_ptr<PathStrings> strings;
    std::string kept;
    bool config = is_config_file(path);
    // A venv's pyvenv.cfg says which interpreter it runs and whether it
    // sees the system's packages (verdict/python_target.cpp).
    bool venv_config = path.size() >= 11 && path.compare(path.size() - 11, 11, "/pyvenv.cfg") == 0;
    bool first = true;
    bool executable = n.mode & 0111;
    auto say = [this](std::string what) { anomaly(std::move(what)); };
    UniqueFd whole = capture_file(limits_, path, e.size, name_, say);
    for (size_t r; (r = tar_.read(buf_.data(), buf_.size())) > 0;) {
      if (whole) write_all(whole.get(), buf_.data(), r, name_ + ":" + path);
      if (first) {
        first = false;
        if (has_elf_magic(buf_.data(), r)) {
          // What the capture may hold while the file streams past.
          reading.add(std::min<uint64_t>(e.size, kHead + kPrefix + kElfBudget), name_, "the ELF files being read");
          elf = std::make_unique<ElfCapture>(e.size);
          if (executable) strings = std::make_unique<PathStrings>();
        }
      }
      if (elf) elf->feed(buf_.data(), r);
      if (strings) strings->feed(buf_.data(), r);
      size_t cap = config         ? kConfigMax
                   : venv_config  ? kVenvConfigMax
                   : (executable || kept.rfind("#!", 0) == 0 || kept.empty()) ? kScriptHead
                                                                              : 0;
      if (!elf && kept.size() < cap) kept.append(buf_.data(), std::min(r, cap - kept.size()));
    }
    std::shared_ptr<FileFacts> facts;
    if (elf) {
      facts = std::make_shared<FileFacts>();
      try {
        facts->elf = elf->finish(path);
      } catch (const Error& err) {
        facts->elf_error = err.what();
      }
      s_.held.add(facts->elf ? facts_bytes(*facts->elf) : sizeof(FileFacts) + facts->elf_error.size(), name_,
                  "the layers' ELF facts");
      if (strings)
        if (auto found = strings->finish(); found && affordable(e, found->size())) facts->path_strings = *found;
    } else if (!kept.empty() && (config || venv_config || executable || kept.rfind("#!", 0) == 0) &&
               affordable(e, kept.size())) {
      facts = std::make_shared<FileFacts>();
      facts->content = std::move(kept);
    }
    if (whole) {
      if (!facts) facts = std::make_shared<FileFacts>();
      facts->data = std::make_shared<const UniqueFd>(std::move(whole));
    }
    if (facts) n.facts = std::move(facts);
  }

  TarReader& tar_;
  const std::string& name_;
  const LayerLimits& limits_;
  LayerSummary& s_;
  std::vector<char> buf_;
  size_t specials_ = 0, more_anomalies_ = 0;
  uint64_t kept_bytes_ = 0;
  bool budget_noted_ = false;
  std::string first_special_;
};

}  // namespace

LayerSummary summarize_layer(Reader& blob, const std::string& name, const LayerLimits& limits) {
  LayerSummary s;
  s.name = name;
  HashingReader stored(blob);
  auto tar_stream = decompress(stored, name, limits.max_tar_bytes, &s.compression);
  // Reading, hashing and decompressing the blob run on one thread; hashing
  // and parsing the tar on this one.
  PrefetchReader ahead(*tar_stream);
  HashingReader tar_bytes(ahead);
  TarReader tar(tar_bytes, name);
  LayerPass pass(tar, name, limits, s);
  pass.run();
  // Trailing zero blocks and padding belong to the tar too (diff_id).
  std::vector<char>& buf = pass.buffer();
  for (size_t r; (r = tar_bytes.read(buf.data(), buf.size())) > 0;) {
  }
  ahead.finish();
  for (size_t r; (r = stored.read(buf.data(), buf.size())) > 0;) {
  }
  s.blob_sha256 = stored.hex();
  s.diff_id = tar_bytes.hex();
  s.stored_bytes = stored.count();
  s.tar_bytes = tar_bytes.count();
  return s;
}

}  // namespace memprofile
