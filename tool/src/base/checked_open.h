// A file another process wrote, opened so that nothing it did to the name
// can hold or fool the reader: in a shared directory (a 0777 emptyDir, the
// recommended 1777 one) any member of a tree can put a FIFO, a device, a
// directory or a link under a name the reader expects, or swap one in
// between a check and an open. So the name is opened once, without
// blocking and without following a link, and everything is judged on the
// descriptor: a regular file, of an owner the caller accepts, no larger
// than the caller reads. What is read then is the size fstat gave, at most.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/unique_fd.h"

namespace memprofile {

struct CheckedFile {
  UniqueFd fd;          // open for reading, blocking again (it is a regular file)
  uint64_t size = 0;    // fstat's, at open: read no more than this (also when refused)
  uid_t owner = 0;
  std::string why;      // when fd is not set: one line, without the name
  int error = 0;        // the open's errno, when it was the open that failed (ENOENT: no such name)
};

struct OpenRules {
  // The owners accepted: `uid`, and root (what root made is root's to vouch
  // for). A negative uid accepts any owner.
  long uid = -1;
  uint64_t max_size = UINT64_MAX;
};

// Opens `name` in the directory `dir_fd` (AT_FDCWD: the working one) with
// O_NONBLOCK|O_NOFOLLOW|O_CLOEXEC|O_NOCTTY and judges it by fstat. Never
// blocks, never throws: a name that fails any check comes back without an
// fd and with `why`.
CheckedFile open_checked(int dir_fd, const std::string& name, const OpenRules& rules);

// The same for a directory (O_DIRECTORY|O_NOFOLLOW), owned as the rules say.
CheckedFile open_checked_dir(int dir_fd, const std::string& name, const OpenRules& rules);

}  // namespace memprofile
