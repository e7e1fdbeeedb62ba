// The users a program's processes will run as besides the one that starts
// it, where its own configuration says, and whether each can write a
// directory: a profile directory only root can write is no place for the
// profiles of nginx's workers, which run as its `user`.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "image/file_tree.h"
#include "verdict/preflight.h"

namespace memprofile {

struct TreeUser {
  std::string name;  // as the configuration names it
  UserIds ids;
  std::string from;  // where it was read: "nginx's `user` in /etc/nginx/nginx.conf"
};

// `program` is the target's path in `tree`, `argv` its command line, and
// `starting_uid` the uid it is started as. nginx started as root runs its
// workers as its `user` directive says (nobody when there is none); other
// programs: none known. A name the tree's /etc/passwd does not know is left
// out (the program will say so itself).
std::vector<TreeUser> program_users(const FileTree& tree, const std::string& program,
                                    const std::vector<std::string>& argv, uint32_t starting_uid);

// Whether `ids` can create files in a directory of status `st` (the mode's
// owner, group or other bits, as the kernel checks them; root always can).
bool can_write_dir(const struct stat& st, const UserIds& ids);

}  // namespace memprofile
