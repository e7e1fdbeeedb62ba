#include "image/file_tree.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace memprofile {

namespace {

constexpr int kMaxSymlinks = 40;  // Linux's MAXSYMLINKS

std::vector<std::string> split_components(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) out.emplace_back(path, i, j - i);
    i = j + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& parts) {
  if (parts.empty()) return "/";
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out;
}

// The path relative to the root fd: "" for "/" is not valid for openat, so
// use ".".
std::string relative(const std::string& canonical) {
  size_t i = canonical.find_first_not_of('/');
  return i == std::string::npos ? "." : canonical.substr(i);
}

}  // namespace

std::string normalize_path(const std::string& path) {
  std::vector<std::string> parts;
  for (auto& c : split_components(path)) {
    if (c == ".") continue;
    if (c == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(std::move(c));
  }
  return join(parts);
}

std::string dirname_of(const std::string& path) {
  size_t i = path.rfind('/');
  if (i == std::string::npos) return ".";
  if (i == 0) return "/";
  return path.substr(0, i);
}

std::optional<Resolved> try_resolve(const FileTree& tree, const std::string& path) {
  try {
    return resolve(tree, path);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::optional<Resolved> resolve(const FileTree& tree, const std::string& path, bool follow_last,
                                const std::string& cwd) {
  std::vector<std::string> done;  // canonical components resolved so far
  std::vector<std::string> todo;  // components still to walk, in reverse order
  auto push_front = [&todo](const std::string& p) {
    auto parts = split_components(p);
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) todo.push_back(*it);
  };
  // `todo` is a stack: the path goes in first so that a relative one is
  // walked after the working directory it is relative to.
  push_front(path);
  if (path.empty() || path[0] != '/') push_front(cwd);
  int links = 0;
  FsNode node;
  node.kind = FsNode::Kind::Directory;  // the root itself
  while (!todo.empty()) {
    std::string c = std::move(todo.back());
    todo.pop_back();
    if (c == ".") continue;
    if (c == "..") {
      if (!done.empty()) done.pop_back();
      node.kind = FsNode::Kind::Directory;
      continue;
    }
    done.push_back(c);
    std::string here = join(done);
    node = tree.lstat(here);
    if (node.kind == FsNode::Kind::Missing) return std::nullopt;
    bool last = todo.empty();
    if (node.kind == FsNode::Kind::Symlink && (!last || follow_last)) {
      if (++links > kMaxSymlinks)
        throw FileError(tree.display(path), "too many levels of symbolic links (loop at " + tree.display(here) + ")");
      done.pop_back();
      const std::string& target = node.link_target;
      if (!target.empty() && target[0] == '/') done.clear();  // absolute: restart at the root
      push_front(target);
      continue;
    }
    if (!last && node.kind != FsNode::Kind::Directory)
      throw FileError(tree.display(path), tree.display(here) + " is not a directory");
  }
  Resolved r;
  r.path = join(done);
  if (done.empty()) node = tree.lstat("/");
  r.node = node;
  return r;
}

HostTree::HostTree(const std::string& root_dir) : root_dir_(root_dir) {
  root_fd_ = ::open(root_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd_ < 0) throw FileError(root_dir, std::string("cannot open root directory: ") + std::strerror(errno));
}

HostTree::~HostTree() { ::close(root_fd_); }

// Paths are shown as the program inside the root would see them: the user
// named the root once, and image paths read better without it.
std::string HostTree::display(const std::string& path) const { return path; }

FsNode HostTree::lstat(const std::string& path) const {
  FsNode n;
  struct stat st;
  std::string rel = relative(path);
  if (fstatat(root_fd_, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return n;
    throw FileError(display(path), std::string("cannot stat: ") + std::strerror(errno));
  }
  n.mode = st.st_mode & 07777;
  n.uid = st.st_uid;
  n.gid = st.st_gid;
  n.size = static_cast<uint64_t>(st.st_size);
  if (S_ISREG(st.st_mode)) {
    n.kind = FsNode::Kind::Regular;
  } else if (S_ISDIR(st.st_mode)) {
    n.kind = FsNode::Kind::Directory;
  } else if (S_ISLNK(st.st_mode)) {
    n.kind = FsNode::Kind::Symlink;
    std::vector<char> buf(static_cast<size_t>(st.st_size > 0 && st.st_size < 65536 ? st.st_size : 4096) + 1);
    ssize_t len = readlinkat(root_fd_, rel.c_str(), buf.data(), buf.size());
    if (len < 0) throw FileError(display(path), std::string("cannot read symlink: ") + std::strerror(errno));
    n.link_target.assign(buf.data(), static_cast<size_t>(len));
  } else {
    n.kind = FsNode::Kind::Other;
  }
  return n;
}

int HostTree::open_file(const std::string& path) const {
  std::string rel = relative(path);
  struct open_how how;
  std::memset(&how, 0, sizeof how);
  // Without blocking: the tree may be a live process's root (serve's
  // /proc/PID/root), where a FIFO or a device can take a file's place
  // between the lstat that resolved it and this open. Only a regular file
  // is handed out.
  how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
  // The path is canonical already: any symlink met now appeared after we
  // resolved it, so refuse rather than follow.
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = syscall(SYS_openat2, root_fd_, rel.c_str(), &how, sizeof how);
  if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {  // old kernel or seccomp
    fd = openat(root_fd_, rel.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  }
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(static_cast<int>(fd));
    errno = EINVAL;
    return -1;
  }
  fcntl(static_cast<int>(fd), F_SETFL, fcntl(static_cast<int>(fd), F_GETFL) & ~O_NONBLOCK);
  return static_cast<int>(fd);
}

std::shared_ptr<const ElfInfo> HostTree::elf(const std::string& path) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = elf_cache_.find(path);
    if (it != elf_cache_.end()) return it->second;
  }
  auto info = elf_once(path);
  std::lock_guard<std::mutex> lock(mu_);
  elf_cache_[path] = info;
  return info;
}

std::shared_ptr<const ElfInfo> HostTree::elf_once(const std::string& path) const {
  int fd = open_file(path);
  if (fd < 0) throw FileError(display(path), std::string("cannot open: ") + std::strerror(errno));
  std::shared_ptr<const ElfInfo> info;
  try {
    unsigned char magic[4];
    ssize_t got = pread(fd, magic, sizeof magic, 0);
    if (got == 4 && has_elf_magic(magic, 4)) info = std::make_shared<ElfInfo>(read_elf_fd(fd, display(path)));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return info;
}

void HostTree::walk(const std::string& dir, const std::function<void(const std::string&)>& on_file) const {
  std::vector<std::string> stack{dir};
  while (!stack.empty()) {
    std::string here = std::move(stack.back());
    stack.pop_back();
    int fd = openat(root_fd_, relative(here).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) throw FileError(display(here), std::string("cannot open directory: ") + std::strerror(errno));
    DIR* d = fdopendir(fd);
    if (!d) {
      ::close(fd);
      throw FileError(display(here), std::string("cannot read directory: ") + std::strerror(errno));
    }
    std::vector<std::pair<std::string, bool>> entries;  // name, is_dir
    const std::string prefix = here == "/" ? "/" : here + "/";
    while (struct dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      unsigned char type = e->d_type;
      if (type == DT_UNKNOWN) {
        struct stat st;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        type = S_ISREG(st.st_mode) ? DT_REG : S_ISDIR(st.st_mode) ? DT_DIR : DT_UNKNOWN;
      }
      if (type == DT_REG || type == DT_DIR) entries.emplace_back(std::move(name), type == DT_DIR);
    }
    closedir(d);
    std::sort(entries.begin(), entries.end());
    // Files of this directory first, then its subdirectories in order.
    for (const auto& [name, is_dir] : entries)
      if (!is_dir) on_file(prefix + name);
    for (auto it = entries.rbegin(); it != entries.rend(); ++it)
      if (it->second) stack.push_back(prefix + it->first);
  }
}

std::optional<std::string> HostTree::read(const std::string& path, size_t limit) const {
  int fd = open_file(path);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[65536];
  while (out.size() < limit) {
    ssize_t n = ::read(fd, buf, std::min(sizeof buf, limit - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool HostTree::has_file_caps(const std::string& path) const {
  int fd = open_file(path);
  if (fd < 0) return false;
  ssize_t n = fgetxattr(fd, "security.capability", nullptr, 0);
  ::close(fd);
  return n > 0;
}

}  // namespace memprofile
