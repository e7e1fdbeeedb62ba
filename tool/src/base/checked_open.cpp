#include "base/checked_open.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace memprofile {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

CheckedFile open_as(int dir_fd, const std::string& name, const OpenRules& rules, bool directory) {
  CheckedFile out;
  const int flags = O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | (directory ? O_DIRECTORY : 0);
  UniqueFd fd(::openat(dir_fd, name.c_str(), flags));
  if (!fd) {
    out.error = errno;
    // O_NOFOLLOW on a link: ELOOP; O_DIRECTORY on anything else: ENOTDIR.
    out.why = out.error == ELOOP     ? "a symbolic link, not followed"
              : out.error == ENOTDIR ? std::string("not a directory")
                                     : std::string("cannot open: ") + std::strerror(out.error);
    return out;
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    out.why = std::string("cannot stat: ") + std::strerror(errno);
    return out;
  }
  out.size = static_cast<uint64_t>(st.st_size);
  out.owner = st.st_uid;
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    out.why = directory ? "not a directory" : kind_of(st.st_mode);
    return out;
  }
  if (rules.uid >= 0 && st.st_uid != 0 && st.st_uid != static_cast<uid_t>(rules.uid)) {
    out.why = "owned by uid " + std::to_string(st.st_uid) + ", neither the process's uid " + std::to_string(rules.uid) +
              " nor root";
    return out;
  }
  if (!directory && static_cast<uint64_t>(st.st_size) > rules.max_size) {
    out.why = std::to_string(st.st_size) + " bytes, over the " + std::to_string(rules.max_size >> 20) + " MiB read here";
    return out;
  }
  // A regular file never blocks a read: blocking again, so that readers
  // that loop on read() need not know of EAGAIN.
  if (!directory) fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  out.fd = std::move(fd);
  return out;
}

}  // namespace

CheckedFile open_checked(int dir_fd, const std::string& name, const OpenRules& rules) {
  return open_as(dir_fd, name, rules, false);
}

CheckedFile open_checked_dir(int dir_fd, const std::string& name, const OpenRules& rules) {
  return open_as(dir_fd, name, rules, true);
}

}  // namespace memprofile
