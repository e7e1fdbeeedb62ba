// The verdict engine: given a file in a FileTree, can a library injected with
// LD_PRELOAD attach to it, and if not, why and what to change. Used by
// `check`, and by `preflight` and `exec` on top of it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "elf_info.h"
#include "file_tree.h"
#include "findings.h"
#include "loader.h"

namespace memprofile {

struct FileReport {
  std::string path;     // as shown to the user
  std::string canonical;  // inside the tree
  std::shared_ptr<const ElfInfo> elf;
  uint32_t mode = 0, uid = 0, gid = 0;  // of the file
  bool file_caps = false;
  bool root_checked = false;              // judged against what the root provides
  std::optional<LoadResult> load;         // with a root: the simulated start
  std::string root_glibc;                 // highest GLIBC_x.y the root's libc defines
  std::vector<Finding> findings;

  bool profilable() const;
};

struct CheckerOptions {
  bool use_root = false;             // resolve dependencies in the tree
  std::optional<std::string> preload;  // path of the preload library (in the tree)
  std::string ld_library_path;
};

class Checker {
 public:
  Checker(const FileTree& tree, CheckerOptions opts);
  // Judges the ELF file at `canonical` (already resolved inside the tree).
  // `elf` is its parsed form. Never throws for problems of the target: those
  // become findings.
  FileReport check(const std::string& canonical, std::shared_ptr<const ElfInfo> elf) const;

 private:
  void check_alone(FileReport& r) const;
  void check_in_root(FileReport& r) const;
  void check_preload(FileReport& r) const;

  const FileTree& tree_;
  CheckerOptions opts_;
  Loader loader_;
  // The preload library, resolved once: its canonical path and facts, or
  // the finding that stops it.
  std::string preload_path_;
  std::shared_ptr<const ElfInfo> preload_elf_;
  std::optional<Finding> preload_problem_;
};

}  // namespace memprofile
