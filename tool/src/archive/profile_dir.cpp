#include "archive/profile_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "base/error.h"

namespace memprofile {

namespace {

// How many directories below the output directory collect descends: a
// profiler writes a level or two; a bound keeps a hostile or runaway tree
// (or a bind mount of /) from walking forever.
constexpr int kMaxDepth = 16;

std::string not_regular(int dirfd, const std::string& name, mode_t mode) {
  if (S_ISLNK(mode)) {
    char target[4096];
    ssize_t n = readlinkat(dirfd, name.c_str(), target, sizeof target - 1);
    return std::string("a symbolic link") + (n >= 0 ? " (-> " + std::string(target, static_cast<size_t>(n)) + ")" : "") +
           ", not followed";
  }
  if (S_ISFIFO(mode)) return "a fifo, not a regular file";
  if (S_ISSOCK(mode)) return "a socket, not a regular file";
  if (S_ISCHR(mode)) return "a character device, not a regular file";
  if (S_ISBLK(mode)) return "a block device, not a regular file";
  return "not a regular file or directory";
}

bool collected(Backend b, const std::string& name) {
  return is_profile_file(b, name) || (b == Backend::Memray && is_memray_marks(name)) || is_process_record(name) ||
         is_memory_record(name);
}

void list_dir(Backend b, UniqueFd fd, const std::string& prefix, int depth, ProfileListing& out) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(fdopendir(fd.get()), closedir);
  if (!dir) {
    out.skipped[prefix] = std::string("cannot list the directory: ") + std::strerror(errno);
    return;
  }
  fd.release();  // the DIR owns it now
  DIR* d = dir.get();
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string rel = prefix + name;
    struct stat st;
    if (fstatat(dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone since readdir
    if (S_ISREG(st.st_mode)) {
      if (collected(b, name)) out.files[rel] = static_cast<uint64_t>(st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      if (depth >= kMaxDepth) {
        out.skipped[rel + "/"] = "more than " + std::to_string(kMaxDepth) + " directories deep, not descended";
        continue;
      }
      UniqueFd sub(openat(dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub)
        out.skipped[rel + "/"] = std::string("cannot open the directory: ") + std::strerror(errno);
      else
        list_dir(b, std::move(sub), rel + "/", depth + 1, out);
    } else {
      out.skipped[rel] = not_regular(dirfd(d), name, st.st_mode);
    }
  }
}

}  // namespace

UniqueFd open_output_dir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw FileError(dir, std::string("cannot open the output directory: ") + std::strerror(errno));
  return fd;
}

ProfileListing list_profiles(Backend b, const std::string& dir) {
  ProfileListing out;
  list_dir(b, open_output_dir(dir), "", 0, out);
  return out;
}

UniqueFd open_beneath(int root, const std::string& rel) {
  UniqueFd dir;  // the directory reached so far below `root`
  size_t start = 0;
  for (size_t slash; (slash = rel.find('/', start)) != std::string::npos; start = slash + 1) {
    UniqueFd sub(openat(dir ? dir.get() : root, rel.substr(start, slash - start).c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) return sub;
    dir = std::move(sub);
  }
  return UniqueFd(
      openat(dir ? dir.get() : root, rel.substr(start).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
}

}  // namespace memprofile
