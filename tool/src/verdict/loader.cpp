#include "verdict/loader.h"

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <set>

#include "base/error.h"

namespace memprofile {

namespace {

constexpr size_t kMaxObjects = 4096;
constexpr size_t kMaxCacheBytes = 64u << 20;
constexpr size_t kMaxCacheCandidates = 16;  // cache entries tried for one name

// ldconfig.h's flag values.
constexpr int32_t kFlagElfLibc6 = 0x0003;
constexpr int32_t kFlagTypeMask = 0x00ff;
constexpr int32_t kFlagRequiredMask = 0xff00;
constexpr int32_t kFlagX8664Lib64 = 0x0300;
constexpr int32_t kFlagAarch64Lib64 = 0x0a00;
constexpr int32_t kFlagArmLibHf = 0x0900;
constexpr int32_t kFlagRiscvDouble = 0x1000;

uint32_t read_u32(const std::string& b, size_t off) {
  uint32_t v;
  std::memcpy(&v, b.data() + off, 4);
  return v;
}

std::vector<std::string> split_list(const std::string& s, const char* seps) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find_first_of(seps, i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.emplace_back(s, i, j - i);
    i = j + 1;
  }
  return out;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size())) s.replace(i, from.size(), to);
}

}  // namespace

bool ld_cache_flags_match(int32_t flags, uint16_t machine, int elf_class) {
  switch (machine) {
    case EM_X86_64:
      return elf_class == 64 ? flags == (kFlagX8664Lib64 | kFlagElfLibc6) : flags == (0x0800 | kFlagElfLibc6);
    case EM_AARCH64: return flags == (kFlagAarch64Lib64 | kFlagElfLibc6);
    case EM_ARM: return flags == (kFlagArmLibHf | kFlagElfLibc6);
    case EM_RISCV: return (flags & kFlagTypeMask) == kFlagElfLibc6 && (flags & kFlagRequiredMask) == kFlagRiscvDouble;
    case EM_386: return flags == 1 || flags == kFlagElfLibc6;
    default: return (flags & kFlagTypeMask) == kFlagElfLibc6;
  }
}

std::vector<LdCacheEntry> parse_ld_cache(const std::string& b) {
  static const char kOld[] = "ld.so-1.7.0";
  static const char kNew[] = "glibc-ld.so.cache1.1";
  constexpr size_t kOldLen = sizeof kOld - 1, kNewLen = sizeof kNew - 1;
  constexpr size_t kNewHeader = kNewLen + 4 + 4 + 20;  // magic+version, nlibs, len_strings, 5 unused
  constexpr size_t kNewEntry = 24;                     // flags, key, value, osversion, hwcap(8)
  std::vector<LdCacheEntry> out;
  size_t base = 0;
  if (b.size() >= kOldLen + 4 && b.compare(0, kOldLen, kOld) == 0) {
    // Old format first; the new table, if any, follows its entries, aligned.
    uint64_t nlibs = read_u32(b, kOldLen);
    uint64_t after = kOldLen + 4 + nlibs * 12;
    after = (after + 7) & ~uint64_t{7};
    if (after >= b.size()) return out;  // old-only caches are not used by current glibc
    base = static_cast<size_t>(after);
  }
  if (b.size() < base + kNewHeader || b.compare(base, kNewLen, kNew) != 0) return out;
  uint64_t nlibs = read_u32(b, base + kNewLen);
  if (nlibs > (b.size() - base - kNewHeader) / kNewEntry) return out;
  for (uint64_t i = 0; i < nlibs; ++i) {
    size_t e = base + kNewHeader + static_cast<size_t>(i) * kNewEntry;
    int32_t flags = static_cast<int32_t>(read_u32(b, e));
    uint64_t key = read_u32(b, e + 4), value = read_u32(b, e + 8);
    auto str = [&](uint64_t off) -> std::optional<std::string_view> {
      uint64_t at = base + off;  // new-format strings are relative to its header
      if (at >= b.size()) return std::nullopt;
      size_t scan = std::min<size_t>(b.size() - static_cast<size_t>(at), kMaxLdCacheString + 1);
      const void* nul = std::memchr(b.data() + at, '\0', scan);
      if (!nul) return std::nullopt;
      return std::string_view(b.data() + at, static_cast<size_t>(static_cast<const char*>(nul) - (b.data() + at)));
    };
    auto k = str(key), v = str(value);
    if (k && v) out.push_back({*k, *v, flags});
  }
  return out;
}

const LoadedObject* LoadResult::find(const std::string& name) const {
  auto it = names.find(name);
  return it == names.end() ? nullptr : &objects[it->second];
}

Loader::Loader(const FileTree& tree) : tree_(tree) {}

const std::vector<LdCacheEntry>& Loader::ld_cache() const {
  std::call_once(cache_once_, [this] {
    cache_.emplace();
    if (auto r = resolve(tree_, "/etc/ld.so.cache"); r && r->node.kind == FsNode::Kind::Regular)
      if (auto bytes = tree_.read(r->path, kMaxCacheBytes)) {
        cache_bytes_ = std::move(*bytes);
        *cache_ = parse_ld_cache(cache_bytes_);
      }
  });
  return *cache_;
}

std::vector<std::string> Loader::default_dirs(uint16_t machine, int elf_class, bool musl) const {
  auto is_dir = [&](const std::string& p) {
    auto r = try_resolve(tree_, p);
    return r && r->node.kind == FsNode::Kind::Directory;
  };
  if (musl) {
    std::string arch = machine == EM_X86_64 ? "x86_64" : machine == EM_AARCH64 ? "aarch64" : machine_name(machine);
    if (auto r = resolve(tree_, "/etc/ld-musl-" + arch + ".path"); r && r->node.kind == FsNode::Kind::Regular)
      if (auto text = tree_.read(r->path, 65536)) return split_list(*text, ":\n");
    return {"/lib", "/usr/local/lib", "/usr/lib"};
  }
  std::string triplet = multiarch_triplet(machine, elf_class);
  if (!triplet.empty() && (is_dir("/lib/" + triplet) || is_dir("/usr/lib/" + triplet)))
    return {"/lib/" + triplet, "/usr/lib/" + triplet, "/lib", "/usr/lib"};
  if (elf_class == 64 && (is_dir("/lib64") || is_dir("/usr/lib64"))) return {"/lib64", "/usr/lib64"};
  return {"/lib", "/usr/lib"};
}

std::optional<std::string> Loader::try_candidate(const std::string& candidate, const ElfInfo& want,
                                                 std::vector<std::string>* skipped,
                                                 std::shared_ptr<const ElfInfo>* elf) const {
  std::optional<Resolved> r;
  try {
    r = resolve(tree_, candidate);
  } catch (const Error& e) {
    skipped->push_back(candidate + ": " + e.what());
    return std::nullopt;
  }
  if (!r) return std::nullopt;
  if (r->node.kind != FsNode::Kind::Regular) {
    if (r->node.kind != FsNode::Kind::Directory) skipped->push_back(candidate + ": not a regular file");
    return std::nullopt;
  }
  std::shared_ptr<const ElfInfo> info;
  try {
    info = tree_.elf(r->path);
  } catch (const Error& e) {
    skipped->push_back(candidate + ": " + e.what());
    return std::nullopt;
  }
  if (!info) {
    skipped->push_back(candidate + ": not an ELF file");
    return std::nullopt;
  }
  if (info->machine != want.machine || info->elf_class != want.elf_class) {
    skipped->push_back(candidate + ": wrong architecture (" + machine_name(info->machine) + " ELF" +
                       std::to_string(info->elf_class) + ")");
    return std::nullopt;
  }
  *elf = info;
  return r->path;
}

// One simulated start, one member per step of ld.so's: the interpreter,
// then the breadth-first mapping of preloads and needs (each name searched
// as glibc or musl searches it), then the version checks.
class Loader::Run {
 public:
  Run(const Loader& loader, const std::string& exe_path, const ElfInfo& exe, const LoadOptions& opts)
      : loader_(loader),
        exe_(exe),
        musl_(exe.libc() == Libc::Musl),
        platform_(machine_name(exe.machine)),
        triplet_(multiarch_triplet(exe.machine, exe.elf_class)),
        defaults_(loader.default_dirs(exe.machine, exe.elf_class, musl_)),
        env_dirs_(split_list(opts.ld_library_path, ":;")),
        opts_(opts) {
    nodes_.push_back({exe_path, std::make_shared<ElfInfo>(exe), -1});
  }

  LoadResult run() {
    map_interpreter();
    map_objects();
    check_versions(nodes_[0].path, exe_);
    for (const auto& o : result_.objects)
      if (o.elf) check_versions(o.path, *o.elf);
    return std::move(result_);
  }

 private:
  struct Node {
    std::string path;
    std::shared_ptr<const ElfInfo> elf;
    int parent;  // who loaded it; -1 for the executable
  };

  // ld.so is loaded before anything else, so a DT_NEEDED on its soname
  // matches it instead of searching.
  void map_interpreter() {
    const std::string& interp = exe_.interpreter;
    if (interp.empty()) return;
    try {
      auto r = resolve(loader_.tree_, interp);
      if (!r || r->node.kind != FsNode::Kind::Regular) return;
      result_.interpreter = r->path;
      std::shared_ptr<const ElfInfo> info;
      try {
        info = loader_.tree_.elf(r->path);
      } catch (const Error&) {
      }
      result_.objects.push_back(LoadedObject{interp, nodes_[0].path, r->path, "PT_INTERP", {}, info, false});
      size_t idx = result_.objects.size() - 1;
      auto& by_name = result_.names;
      by_name[interp] = idx;
      by_name[interp.substr(interp.rfind('/') + 1)] = idx;
      if (info && !info->soname.empty()) by_name[info->soname] = idx;
      // musl's loader is also its libc and answers to libc's names itself.
      if (musl_)
        for (const char* alias : {"libc.so", "libc.musl-x86_64.so.1", "libc.musl-aarch64.so.1"}) by_name[alias] = idx;
    } catch (const Error&) {
    }
  }

  // $ORIGIN, $LIB and $PLATFORM, as the object `n` sees them.
  std::string expand(std::string s, const Node& n) const {
    if (s.find('$') == std::string::npos) return s;
    std::string origin = dirname_of(n.path);
    std::string lib = triplet_.empty() ? (exe_.is_64() ? "lib64" : "lib") : "lib/" + triplet_;
    for (const auto& [k, v] : {std::pair<std::string, std::string>{"ORIGIN", origin}, {"LIB", lib}, {"PLATFORM", platform_}}) {
      replace_all(s, "${" + k + "}", v);
      replace_all(s, "$" + k, v);
    }
    return s;
  }

  bool found(LoadedObject& o, const std::string& candidate, const char* via) const {
    auto p = loader_.try_candidate(candidate, exe_, &o.skipped, &o.elf);
    if (!p) return false;
    o.path = *p;
    o.via = via;
    return true;
  }

  // `name` in each of `dirs` (expanded as `owner` sees them) until found.
  bool try_dirs(LoadedObject& o, const std::string& name, const std::vector<std::string>& dirs, const Node& owner,
                const char* via) const {
    for (const auto& d : dirs) {
      std::string dir = expand(d, owner);
      if (dir.empty() || dir[0] != '/') continue;  // relative to the cwd of a process we do not have
      if (found(o, dir + "/" + name, via)) return true;
    }
    return false;
  }

  // musl: LD_LIBRARY_PATH, each loader's rpath or runpath up the chain, the defaults.
  void search_musl(LoadedObject& o, const std::string& name, int requester) const {
    const Node& req = nodes_[static_cast<size_t>(requester)];
    if (try_dirs(o, name, env_dirs_, req, "LD_LIBRARY_PATH")) return;
    for (int l = requester; l >= 0; l = nodes_[static_cast<size_t>(l)].parent) {
      const Node& n = nodes_[static_cast<size_t>(l)];
      const std::string& list = n.elf->runpath.empty() ? n.elf->rpath : n.elf->runpath;
      if (try_dirs(o, name, split_list(list, ":"), n, "rpath")) return;
    }
    try_dirs(o, name, defaults_, req, "default");
  }

  // glibc's DT_RPATH chain: the requester's and its loaders' up to the
  // executable, while none of them has a DT_RUNPATH.
  bool search_rpaths(LoadedObject& o, const std::string& name, int requester) const {
    bool did_main = false;
    for (int l = requester; l >= 0; l = nodes_[static_cast<size_t>(l)].parent) {
      const Node& n = nodes_[static_cast<size_t>(l)];
      did_main |= l == 0;
      if (n.elf->runpath.empty() && try_dirs(o, name, split_list(n.elf->rpath, ":"), n, "rpath")) return true;
    }
    const Node& exe = nodes_[0];
    return !did_main && exe.elf->runpath.empty() && try_dirs(o, name, split_list(exe.elf->rpath, ":"), exe, "rpath");
  }

  // glibc takes the cache's first entry for the name (hwcaps variants
  // aside) and opens only that; a few more are tried here for hwcaps
  // subdirectories, but never every one of a crafted cache's thousands.
  bool search_cache(LoadedObject& o, const std::string& name) const {
    size_t tried = 0;
    for (const auto& e : loader_.ld_cache()) {
      if (e.name != name || !ld_cache_flags_match(e.flags, exe_.machine, exe_.elf_class)) continue;
      if (++tried > kMaxCacheCandidates) break;
      if (found(o, std::string(e.path), "ld.so.cache")) return true;
    }
    return false;
  }

  // glibc: DT_RPATH, LD_LIBRARY_PATH, DT_RUNPATH, ld.so.cache, the defaults.
  void search_glibc(LoadedObject& o, const std::string& name, int requester) const {
    const Node& req = nodes_[static_cast<size_t>(requester)];
    if (req.elf->runpath.empty() && search_rpaths(o, name, requester)) return;
    if (try_dirs(o, name, env_dirs_, req, "LD_LIBRARY_PATH")) return;
    if (try_dirs(o, name, split_list(req.elf->runpath, ":"), req, "runpath")) return;
    if (req.elf->nodeflib) return;
    if (search_cache(o, name)) return;
    try_dirs(o, name, defaults_, req, "default");
  }

  LoadedObject search(const std::string& raw_name, int requester, bool preload) const {
    LoadedObject o;
    o.name = raw_name;
    o.preload = preload;
    const Node& req = nodes_[static_cast<size_t>(requester)];
    o.requested_by = req.path;
    std::string name = expand(raw_name, req);
    if (name.find('/') != std::string::npos)
      found(o, name[0] == '/' ? name : "/" + name, "path");
    else if (musl_)
      search_musl(o, name, requester);
    else
      search_glibc(o, name, requester);
    return o;
  }

  // Breadth-first like _dl_map_object_deps: preloads, then the executable's
  // needs, then theirs.
  void map_objects() {
    auto& by_name = result_.names;
    std::deque<std::pair<int, std::pair<std::string, bool>>> queue;
    for (const auto& p : opts_.preload) queue.push_back({0, {p, true}});
    for (const auto& n : exe_.needed) queue.push_back({0, {n, false}});
    while (!queue.empty() && result_.objects.size() < kMaxObjects) {
      auto [requester, item] = queue.front();
      queue.pop_front();
      const auto& [name, preload] = item;
      if (!preload && by_name.count(name)) continue;
      LoadedObject o = search(name, requester, preload);
      // Already loaded under another name (e.g. by its soname, or a preload by path)?
      if (!o.path.empty()) {
        auto same = std::find_if(result_.objects.begin(), result_.objects.end(),
                                 [&](const LoadedObject& x) { return x.path == o.path; });
        if (same != result_.objects.end()) {
          by_name[name] = static_cast<size_t>(same - result_.objects.begin());
          if (!preload) continue;
        }
      }
      result_.objects.push_back(o);
      size_t idx = result_.objects.size() - 1;
      by_name[name] = idx;
      if (o.elf) {
        if (!o.elf->soname.empty()) by_name.emplace(o.elf->soname, idx);
        nodes_.push_back({o.path, o.elf, requester});
        int me = static_cast<int>(nodes_.size() - 1);
        for (const auto& n : o.elf->needed) queue.push_back({me, {n, false}});
      }
    }
  }

  // The versions ld.so checks before running anything.
  void check_versions(const std::string& path, const ElfInfo& elf) {
    for (const auto& vn : elf.verneed) {
      auto it = result_.names.find(vn.file);
      if (it == result_.names.end()) continue;
      const LoadedObject& provider = result_.objects[it->second];
      if (!provider.elf || provider.elf->verdef.empty()) continue;  // glibc only warns then
      for (const auto& v : vn.versions)
        if (std::find(provider.elf->verdef.begin(), provider.elf->verdef.end(), v) == provider.elf->verdef.end())
          result_.version_problems.push_back({path, vn.file, v, provider.path});
    }
  }

  const Loader& loader_;
  const ElfInfo& exe_;
  const bool musl_;
  const std::string platform_, triplet_;
  const std::vector<std::string> defaults_, env_dirs_;
  const LoadOptions& opts_;
  std::vector<Node> nodes_;
  LoadResult result_;
};

LoadResult Loader::load(const std::string& exe_path, const ElfInfo& exe, const LoadOptions& opts) const {
  return Run(*this, exe_path, exe, opts).run();
}

}  // namespace memprofile
