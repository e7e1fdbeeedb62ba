// A model of the dynamic loader's library search, run over a FileTree instead
// of a live process: glibc's order from elf/dl-load.c (RPATH of the loader
// chain unless RUNPATH, LD_LIBRARY_PATH, RUNPATH, /etc/ld.so.cache, default
// directories), musl's simpler one, and the version checks that make ld.so
// refuse to start ("version `GLIBC_2.38' not found").
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "elf/elf_info.h"
#include "image/file_tree.h"

namespace memprofile {

struct LoadedObject {
  std::string name;          // as requested: DT_NEEDED entry or LD_PRELOAD item
  std::string requested_by;  // canonical path of the object that asked
  std::string path;          // canonical path where it was found, "" when not
  std::string via;           // how: "path", "rpath", "LD_LIBRARY_PATH", "runpath", "ld.so.cache", "default"
  std::vector<std::string> skipped;  // candidates passed over, with the reason
  std::shared_ptr<const ElfInfo> elf;
  bool preload = false;
};

struct VersionProblem {
  std::string object;    // canonical path of the object that needs the version
  std::string file;      // vn_file, e.g. "libc.so.6"
  std::string version;   // e.g. "GLIBC_2.38"
  std::string provider;  // canonical path of the library that lacks it
};

struct LoadOptions {
  std::vector<std::string> preload;  // LD_PRELOAD items, in order
  std::string ld_library_path;
};

struct LoadResult {
  std::string interpreter;  // canonical path of the loader, "" when missing
  std::vector<LoadedObject> objects;  // preloads first, then breadth-first DT_NEEDED
  std::vector<VersionProblem> version_problems;
  std::map<std::string, size_t> names;  // every name an object answers to -> index in objects
  const LoadedObject* find(const std::string& name) const;
};

// One entry, viewing the cache's own bytes: many entries may share one
// string (a crafted cache points them all at one long one), so copying each
// would cost entries x length; views cost nothing per entry.
struct LdCacheEntry {
  std::string_view name, path;
  int32_t flags = 0;
};

// The longest name or path a cache entry may have (PATH_MAX); an entry with a
// longer one, or one without its NUL, is skipped. This bounds the work per
// entry, so parsing is linear in the cache's size.
constexpr size_t kMaxLdCacheString = 4096;

// Parses an /etc/ld.so.cache image (old, new, or combined format). Returns
// an empty list for anything that is not a cache; never reads out of bounds.
// The entries view `bytes`, which must outlive them.
std::vector<LdCacheEntry> parse_ld_cache(const std::string& bytes);
// The ld.so.cache flags glibc accepts for this machine and class.
bool ld_cache_flags_match(int32_t flags, uint16_t machine, int elf_class);

class Loader {
 public:
  explicit Loader(const FileTree& tree);
  // Simulates starting `exe` (canonical path in the tree) with `opts`.
  LoadResult load(const std::string& exe_path, const ElfInfo& exe, const LoadOptions& opts) const;
  // The directories searched last for this machine, decided from the tree's
  // layout (Debian multiarch, lib64, or plain lib).
  std::vector<std::string> default_dirs(uint16_t machine, int elf_class, bool musl) const;

 private:
  class Run;  // one load(), as named steps (loader.cpp)
  const std::vector<LdCacheEntry>& ld_cache() const;
  std::optional<std::string> try_candidate(const std::string& candidate, const ElfInfo& want,
                                           std::vector<std::string>* skipped,
                                           std::shared_ptr<const ElfInfo>* elf) const;

  const FileTree& tree_;
  mutable std::once_flag cache_once_;  // one Loader serves the checker's worker threads
  mutable std::string cache_bytes_;    // what cache_'s entries view
  mutable std::optional<std::vector<LdCacheEntry>> cache_;
};

}  // namespace memprofile
