#include "verdict/checker.h"

#include <elf.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "base/error.h"
#include "runtime/backend.h"
#include "verdict/heap_coverage.h"

namespace memprofile {

bool FileVerdict::profilable() const {
  return std::none_of(findings.begin(), findings.end(),
                      [](const Finding& f) { return f.severity == Severity::Error; });
}

namespace {

std::string arch_label(const ElfInfo& e) { return machine_name(e.machine) + " ELF" + std::to_string(e.elf_class); }

std::string highest_glibc(const std::vector<std::string>& versions) {
  std::string best;
  for (const auto& v : versions)
    if (v.rfind("GLIBC_2", 0) == 0 && (best.empty() || compare_glibc_versions(v, best) > 0)) best = v;
  return best;
}

}  // namespace

CheckerOptions root_checker_options(const std::string& preload, const std::string& cwd,
                                    const std::string& ld_library_path) {
  CheckerOptions co;
  co.use_root = true;
  if (!preload.empty())
    co.preload = preload[0] == '/' || preload.find('/') == std::string::npos ? preload : normalize_path(cwd + "/" + preload);
  co.ld_library_path = ld_library_path;
  return co;
}

Checker::Checker(const FileTree& tree, CheckerOptions opts) : tree_(tree), opts_(std::move(opts)), loader_(tree) {
  if (!opts_.preload) return;
  const std::string& p = *opts_.preload;
  if (p.find('/') == std::string::npos) {
    preload_by_name_ = true;
    return;
  }
  std::optional<Resolved> r;
  try {
    r = resolve(tree_, p);
  } catch (const Error& e) {
    preload_.problem = make_finding("PRELOAD_NOT_FOUND", std::string("preload library cannot be resolved: ") + e.what());
    return;
  }
  if (!r || r->node.kind != FsNode::Kind::Regular) {
    preload_.problem = make_finding("PRELOAD_NOT_FOUND", "preload library " + tree_.display(p) +
                                                             (r ? " is not a regular file" : " does not exist") +
                                                             ": the loader prints an error and runs the program unprofiled");
    return;
  }
  preload_.path = r->path;
  try {
    preload_.elf = tree_.elf(r->path);
  } catch (const Error& e) {
    preload_.problem = make_finding("PRELOAD_NOT_ELF", std::string("preload library is not a valid ELF file: ") + e.what());
    return;
  }
  if (!preload_.elf)
    preload_.problem = make_finding("PRELOAD_NOT_ELF", "preload library " + tree_.display(p) + " is not an ELF file");
}

FileVerdict Checker::check(const std::string& canonical, std::shared_ptr<const ElfInfo> elf) const {
  FileVerdict r;
  r.canonical = canonical;
  r.path = tree_.display(canonical);
  r.elf = std::move(elf);
  FsNode node = tree_.lstat(canonical);
  r.mode = node.mode;
  r.uid = node.uid;
  r.gid = node.gid;
  if (r.elf->is_program()) r.file_caps = tree_.has_file_caps(canonical);
  check_alone(r);
  ResolvedPreload by_name;
  bool in_root = opts_.use_root && (r.elf->linkage == Linkage::Dynamic || r.elf->linkage == Linkage::SharedLibrary);
  if (in_root) check_in_root(r, preload_by_name_ ? &by_name : nullptr);
  // A bare name is found only by searching as the loader would, which needs
  // the program's root; without one there is nothing to judge it by.
  if (opts_.preload && (!preload_by_name_ || in_root)) check_preload(r, preload_by_name_ ? by_name : preload_);
  if (!opts_.preload && opts_.judge_default_backend) judge_for_default_backend(r);
  return r;
}

// The facts of the default backend's preload library, as heap coverage
// reads them: it defines malloc and free and none of an allocator's own
// entry points (bytehound's libbytehound.so), for the program's machine.
void Checker::judge_for_default_backend(FileVerdict& r) const {
  const ElfInfo& e = *r.elf;
  if (!e.is_program() || e.linkage != Linkage::Dynamic) return;
  ElfInfo preload;
  preload.elf_class = e.elf_class;
  preload.machine = e.machine;
  preload.linkage = Linkage::SharedLibrary;
  preload.defines_malloc = preload.defines_free = true;
  r.coverage_backend = to_string(kDefaultBackend);
  for (auto& f : heap_coverage(r, preload, "the " + r.coverage_backend + " preload library"))
    r.findings.push_back(std::move(f));
}

void Checker::check_alone(FileVerdict& r) const {
  const ElfInfo& e = *r.elf;
  const std::string go = e.go ? (e.go_version.empty() ? "Go" : "Go (" + e.go_version + ")") : "";
  switch (e.linkage) {
    case Linkage::Relocatable:
    case Linkage::Core:
      r.findings.push_back(make_finding("NOT_A_PROGRAM", std::string(elf_type_name(e.type)) +
                                                             " file: not something a loader starts"));
      return;
    case Linkage::SharedLibrary:
      r.findings.push_back(make_finding(
          "SHARED_LIBRARY", "shared library" + (e.soname.empty() ? std::string() : " " + e.soname) +
                                ": it is profiled through the program that loads it"));
      break;
    case Linkage::Static:
      r.findings.push_back(make_finding(
          "STATIC_BINARY",
          "statically linked " + (go.empty() ? std::string("binary") : go + " binary") +
              " (no PT_DYNAMIC): no dynamic loader runs, so LD_PRELOAD is never read",
          e.go ? "LD_PRELOAD cannot reach a static Go binary: use Go's pprof heap profile (/debug/pprof/heap)"
               : ""));
      break;
    case Linkage::StaticPie:
      r.findings.push_back(make_finding(
          "STATIC_PIE", "static-pie " + (go.empty() ? std::string("binary") : go + " binary") +
                            " (PT_DYNAMIC but no PT_INTERP): it relocates itself and no loader reads LD_PRELOAD"));
      break;
    case Linkage::Dynamic:
      break;
  }
  if (e.go && e.linkage != Linkage::Static)
    r.findings.push_back(make_finding("GO_BINARY", go + " binary: the Go heap is not allocated through malloc, so a "
                                                       "preload profiler sees only C allocations made through cgo"));
  if (e.libc() == Libc::Musl && e.linkage != Linkage::SharedLibrary)
    r.findings.push_back(make_finding(
        "MUSL_LIBC", "linked against musl (" + (e.interpreter.empty() ? std::string("libc.so") : e.interpreter) +
                         "): the preload profilers here are glibc libraries, and musl ignores LD_PRELOAD for "
                         "setuid programs entirely"));
  if (!e.is_program()) return;
  bool exec_bits = r.mode & 0111;
  if ((r.mode & S_ISUID) && exec_bits)
    r.findings.push_back(make_finding("SETUID", "setuid: unless its owner runs it, AT_SECURE is set and glibc ignores "
                                                "LD_PRELOAD entries that contain '/' (and musl ignores LD_PRELOAD)"));
  if ((r.mode & S_ISGID) && exec_bits)
    r.findings.push_back(make_finding("SETGID", "setgid: unless run with its group, AT_SECURE is set and glibc ignores "
                                                "LD_PRELOAD entries that contain '/'"));
  if (r.file_caps)
    r.findings.push_back(make_finding("FILE_CAPABILITIES",
                                      "has file capabilities (security.capability): AT_SECURE is set and glibc "
                                      "ignores LD_PRELOAD entries that contain '/'"));
}

void Checker::check_in_root(FileVerdict& r, ResolvedPreload* found) const {
  const ElfInfo& e = *r.elf;
  r.root_checked = true;
  LoadOptions lo;
  lo.ld_library_path = opts_.ld_library_path;
  bool preload_fits = preload_.elf && preload_.elf->machine == e.machine && preload_.elf->elf_class == e.elf_class;
  if (preload_fits) lo.preload.push_back(preload_.path);
  if (found) lo.preload.push_back(*opts_.preload);  // searched like a DT_NEEDED entry of the program
  r.load = loader_.load(r.canonical, e, lo);
  const LoadResult& load = *r.load;
  std::string preload_path = preload_.path;
  if (found) {
    auto o = std::find_if(load.objects.begin(), load.objects.end(), [](const LoadedObject& x) { return x.preload; });
    if (o != load.objects.end() && !o->path.empty()) {
      found->path = preload_path = o->path;
      found->elf = o->elf;
      preload_fits = true;
    } else {
      found->problem = make_finding("PRELOAD_NOT_FOUND",
                                    "preload library " + *opts_.preload + " (a name, searched like a needed library: "
                                    "LD_LIBRARY_PATH, ld.so.cache, default directories) is not found in the root: "
                                    "the loader prints an error and runs the program unprofiled");
    }
  }

  if (e.linkage == Linkage::Dynamic && load.interpreter.empty())
    r.findings.push_back(make_finding("INTERPRETER_MISSING",
                                      "interpreter " + e.interpreter +
                                          " does not exist in the root: the kernel cannot start the program at all"));

  // Which loaded objects belong to the preload library's side of the graph.
  std::set<std::string> preload_side;
  if (preload_fits) preload_side.insert(preload_path);
  for (const auto& o : load.objects) {
    bool mine = preload_side.count(o.requested_by) > 0 && !o.preload;
    if (mine && !o.path.empty()) preload_side.insert(o.path);
    if (!o.path.empty() || o.preload) continue;
    std::string why = o.name + " (needed by " + tree_.display(o.requested_by) + ") is not found in the root";
    if (!o.skipped.empty()) {
      why += "; passed over: " + o.skipped.front();
      if (o.skipped.size() > 1) why += " (+" + std::to_string(o.skipped.size() - 1) + " more)";
    }
    if (mine)
      r.findings.push_back(make_finding("PRELOAD_NEEDED_MISSING", "the preload library's dependency " + why));
    else if (o.name == "libc.so.6")
      r.findings.push_back(make_finding("LIBC_MISSING", why + ": the image has no glibc"));
    else
      r.findings.push_back(make_finding("NEEDED_MISSING", why));
  }

  if (const LoadedObject* libc = load.find("libc.so.6"); libc && libc->elf)
    r.root_glibc = highest_glibc(libc->elf->verdef);

  // One finding per (object, provider), naming the highest missing version.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> missing;
  for (const auto& p : load.version_problems) missing[{p.object, p.provider}].push_back(p.version);
  for (const auto& [key, versions] : missing) {
    const auto& [object, provider] = key;
    std::string glibc = highest_glibc(versions);
    std::string have = r.root_glibc.empty() ? "" : " (it defines up to " + r.root_glibc + ")";
    std::string what = glibc.empty() ? versions.front() : glibc;
    std::string msg = tree_.display(object) + " requires " + what + " but " + tree_.display(provider) +
                      " does not define it" + (glibc.empty() ? "" : have);
    if (preload_side.count(object))
      r.findings.push_back(make_finding(glibc.empty() ? "PRELOAD_NEEDED_MISSING" : "PRELOAD_GLIBC_TOO_NEW",
                                        "the preload library " + msg));
    else
      r.findings.push_back(make_finding(glibc.empty() ? "VERSION_MISSING" : "GLIBC_TOO_OLD", msg));
  }
}

void Checker::check_preload(FileVerdict& r, const ResolvedPreload& pre) const {
  if (pre.problem) {
    r.findings.push_back(*pre.problem);
    return;
  }
  if (!pre.elf) return;
  const ElfInfo& p = *pre.elf;
  const ElfInfo& e = *r.elf;
  std::string name = tree_.display(pre.path);
  if (p.machine != e.machine || p.elf_class != e.elf_class)
    r.findings.push_back(make_finding("PRELOAD_WRONG_ARCH", "preload library " + name + " is " + arch_label(p) +
                                                                " but the target is " + arch_label(e) +
                                                                ": ld.so prints 'cannot be preloaded' and ignores it"));
  if (p.linkage != Linkage::SharedLibrary)
    r.findings.push_back(make_finding("PRELOAD_NOT_SHARED", "preload library " + name + " is " +
                                                                to_string(p.linkage) + ", not a shared library"));
  if (!p.defines_malloc || !p.defines_free)
    r.findings.push_back(make_finding("PRELOAD_NO_MALLOC",
                                      "preload library " + name + " does not define " +
                                          (!p.defines_malloc && !p.defines_free ? "malloc or free"
                                           : !p.defines_malloc                  ? "malloc"
                                                                                : "free") +
                                          ": it cannot interpose the allocator"));
  // heaptrack and bytehound without memprofile's fork fixes (as released,
  // Debian's heaptrack among them) can leave a lock held in a child the
  // program forks: the child then waits for ever, and a server that forks a
  // process per connection (PostgreSQL) stops answering and cannot shut
  // down. A program that never forks is safe with either.
  if (p.defines_malloc && e.heap.calls_fork) {
    const std::string base = pre.path.substr(pre.path.rfind('/') + 1);
    if (base.find("heaptrack") != std::string::npos && !p.heap.heaptrack_fork_safe)
      r.findings.push_back(make_finding(
          "PRELOAD_FORK_HANG", "preload library " + name + " is a heaptrack without memprofile's fork fix, and " +
                                   tree_.display(r.path) + " forks: a child forked while heaptrack's lock is held " +
                                   "(its timer thread takes it every 10 ms) waits for ever in exit() or dlopen()"));
    else if (base.find("bytehound") != std::string::npos && !p.heap.bytehound_fork_safe)
      r.findings.push_back(make_finding(
          "PRELOAD_FORK_HANG", "preload library " + name + " is a bytehound without memprofile's fork fix, and " +
                                   tree_.display(r.path) + " forks: a child forked while another thread holds " +
                                   "bytehound's maps lock waits for ever in its next mmap or munmap"));
  }
  // Attached is not seeing: where the program's heap goes besides the
  // malloc this preload interposes. Only for a profiler that can load here.
  if (p.defines_malloc && p.machine == e.machine && p.linkage == Linkage::SharedLibrary && e.is_program())
    for (auto& f : heap_coverage(r, p, name)) r.findings.push_back(std::move(f));
}

}  // namespace memprofile
