// The output directory as collect reads it: the profile files, the process
// and memory records, and everything it would not copy, with why. Nothing
// in it is ever followed through a link: the profiled application can write
// there, and a link must not make collect stream out a file from elsewhere
// (a secret, /proc/...).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/unique_fd.h"
#include "runtime/backend.h"

namespace memprofile {

struct ProfileListing {
  std::map<std::string, uint64_t> files;       // relative path -> size
  std::map<std::string, std::string> skipped;  // relative path -> why not copied
};

// Lists `dir`, at most 16 directories deep.
ProfileListing list_profiles(Backend backend, const std::string& dir);

// The directory itself, which may be a link (a mount elsewhere).
UniqueFd open_output_dir(const std::string& dir);

// Opens `rel` below `root` one component at a time, never following a link:
// an entry swapped for a symlink since the listing fails with ELOOP (or
// ENOTDIR for a directory). O_NONBLOCK: one swapped for a fifo must not hang
// the open; it is then refused as not a regular file.
// Fails with errno set (closing the directories on the way keeps it).
UniqueFd open_beneath(int root, const std::string& rel);

}  // namespace memprofile
