// A read-only view of a root filesystem (a directory on disk: HostTree; a
// flattened image: ImageTree, image_tree.h) and path resolution confined to it: every symlink,
// absolute or relative, is resolved as if the root were "/", and ".." never
// climbs above it. Nothing reached through a FileTree can escape the root.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "elf/elf_info.h"

namespace memprofile {

struct FsNode {
  enum class Kind { Missing, Regular, Directory, Symlink, Other };
  Kind kind = Kind::Missing;
  uint32_t mode = 0;  // permission and setuid/setgid bits
  uint32_t uid = 0, gid = 0;
  uint64_t size = 0;
  std::string link_target;  // for symlinks
};

class FileTree {
 public:
  virtual ~FileTree() = default;
  // Describes `path` without following a final symlink. `path` is absolute
  // and contains no symlinks in its directory part (resolve() guarantees it).
  virtual FsNode lstat(const std::string& path) const = 0;
  // The ELF facts of the regular file at a canonical path; nullptr when the
  // file is not ELF. Throws FileError for a malformed ELF file.
  virtual std::shared_ptr<const ElfInfo> elf(const std::string& path) const = 0;
  // Like elf(), without remembering the answer (for one-off scans).
  virtual std::shared_ptr<const ElfInfo> elf_once(const std::string& path) const = 0;
  // Up to `limit` bytes of the regular file at a canonical path.
  virtual std::optional<std::string> read(const std::string& path, size_t limit) const = 0;
  // The whole regular file at a canonical path, opened read-only at offset
  // 0 (an fd the caller owns), or -1: an image keeps whole only the files
  // its run asked for (LayerLimits::capture).
  virtual int open_data(const std::string& path) const = 0;
  // Whether the file carries a security.capability xattr (file capabilities).
  virtual bool has_file_caps(const std::string& path) const = 0;
  // How paths in this tree are shown to the user (e.g. "rootfs/usr/bin/x").
  virtual std::string display(const std::string& path) const = 0;
  // Calls `on_file` with the canonical path of every regular file below the
  // directory `dir` (canonical), without following symlinks, sorted by name
  // within each directory.
  virtual void walk(const std::string& dir, const std::function<void(const std::string&)>& on_file) const = 0;
};

// A directory on this machine treated as "/". Opens files with
// openat2(RESOLVE_IN_ROOT) where the kernel has it, as a second fence.
class HostTree : public FileTree {
 public:
  explicit HostTree(const std::string& root_dir);
  ~HostTree() override;
  HostTree(const HostTree&) = delete;
  HostTree& operator=(const HostTree&) = delete;

  FsNode lstat(const std::string& path) const override;
  std::shared_ptr<const ElfInfo> elf(const std::string& path) const override;
  std::shared_ptr<const ElfInfo> elf_once(const std::string& path) const override;
  std::optional<std::string> read(const std::string& path, size_t limit) const override;
  int open_data(const std::string& path) const override { return open_file(path); }
  bool has_file_caps(const std::string& path) const override;
  std::string display(const std::string& path) const override;
  void walk(const std::string& dir, const std::function<void(const std::string&)>& on_file) const override;

  const std::string& root_dir() const { return root_dir_; }
  // Opens a canonical path read-only; -1 with errno set on failure.
  int open_file(const std::string& path) const;

 private:
  std::string root_dir_;
  int root_fd_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::shared_ptr<const ElfInfo>> elf_cache_;
};

struct Resolved {
  std::string path;  // canonical: absolute, no symlinks, no "." or ".."
  FsNode node;       // lstat of the canonical path (never a symlink unless follow_last=false)
};

// Resolves `path` inside `tree` like the kernel would inside a chroot.
// Relative paths are taken from `cwd` (default "/"). Returns nullopt when a
// component is missing; throws Error on a symlink loop (more than 40 links)
// or when a non-directory is used as a directory.
std::optional<Resolved> resolve(const FileTree& tree, const std::string& path, bool follow_last = true,
                                const std::string& cwd = "/");
// resolve(), with a link loop or a non-directory on the way taken as a path
// that is not there: what a question about the image ("is this file
// here?") needs, where the loader would fail the same way.
std::optional<Resolved> try_resolve(const FileTree& tree, const std::string& path);

// Lexically joins and normalises ("/a/./b/../c" -> "/a/c"), clamping at "/".
std::string normalize_path(const std::string& path);
std::string dirname_of(const std::string& path);

}  // namespace memprofile
