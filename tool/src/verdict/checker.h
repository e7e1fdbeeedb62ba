// The verdict engine: given a file in a FileTree, can a library injected with
// LD_PRELOAD attach to it, and if not, why and what to change. Used by
// `check`, and by `preflight` and `exec` on top of it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "elf/elf_info.h"
#include "image/file_tree.h"
#include "verdict/findings.h"
#include "verdict/loader.h"

namespace memprofile {

struct FileVerdict {
  std::string path;     // as shown to the user
  std::string canonical;  // inside the tree
  std::shared_ptr<const ElfInfo> elf;
  uint32_t mode = 0, uid = 0, gid = 0;  // of the file
  bool file_caps = false;
  bool root_checked = false;              // judged against what the root provides
  std::optional<LoadResult> load;         // with a root: the simulated start
  std::string root_glibc;                 // highest GLIBC_x.y the root's libc defines
  // Without a preload named: the backend whose preload the heap coverage
  // was judged for ("bytehound"), "" when a preload was named or none was.
  std::string coverage_backend;
  std::vector<Finding> findings;

  bool profilable() const;
};

struct CheckerOptions {
  bool use_root = false;             // resolve dependencies in the tree
  // The preload library as LD_PRELOAD names it: a path in the tree, or a
  // bare name (no '/'), which glibc searches like a DT_NEEDED entry of the
  // program (its RUNPATH, LD_LIBRARY_PATH, ld.so.cache, default dirs).
  std::optional<std::string> preload;
  std::string ld_library_path;
  // With no preload: judge whether a profile will see the heap as the
  // default backend's preload would (`check`'s first command has no flags:
  // an allocator linked in, an allocator's own entry points, a managed heap
  // hold for every preload profiler, and are said).
  bool judge_default_backend = false;
};

// How programs of a root start there: the preload library as LD_PRELOAD
// names it (a relative path is taken from `cwd`; a name without '/' is
// searched like a needed library) and the LD_LIBRARY_PATH they run with.
CheckerOptions root_checker_options(const std::string& preload, const std::string& cwd,
                                    const std::string& ld_library_path);

class Checker {
 public:
  Checker(const FileTree& tree, CheckerOptions opts);
  // Judges the ELF file at `canonical` (already resolved inside the tree).
  // `elf` is its parsed form. Never throws for problems of the target: those
  // become findings.
  FileVerdict check(const std::string& canonical, std::shared_ptr<const ElfInfo> elf) const;

 private:
  // A preload library found: its canonical path and facts, or the finding
  // that stops it.
  struct ResolvedPreload {
    std::string path;
    std::shared_ptr<const ElfInfo> elf;
    std::optional<Finding> problem;
  };

  void check_alone(FileVerdict& r) const;
  // With a root; a preload named bare is found by this load, into *found.
  void check_in_root(FileVerdict& r, ResolvedPreload* found) const;
  void check_preload(FileVerdict& r, const ResolvedPreload& p) const;
  void judge_for_default_backend(FileVerdict& r) const;

  const FileTree& tree_;
  CheckerOptions opts_;
  Loader loader_;
  bool preload_by_name_ = false;  // searched per program, not resolved once
  ResolvedPreload preload_;       // a preload named by path, resolved once
};

}  // namespace memprofile
