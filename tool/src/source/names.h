// Names inside an image archive, as the stores and the manifest reader
// resolve them.
#pragma once

#include <map>
#include <string>

#include "base/error.h"

namespace memprofile {

// "./a//b/../c" -> "a/c": names inside an archive, relative to its root.
std::string clean_name(const std::string& raw);

// Follows symlink and hard-link entries of an archive (names -> targets).
std::string follow_aliases(const std::map<std::string, std::string>& aliases, std::string name);

// The alias an archive's link entry (tar type '1' or '2') makes of `name`.
std::string link_target(char type, const std::string& name, const std::string& linkname);

// "sha256:HEX" -> "blobs/sha256/HEX"; anything else is a FileError at `where`.
std::string blob_name(const std::string& digest, const std::string& where);

// "the archive holds more than N entries", at `where`.
FileError too_many_entries(const std::string& where);

}  // namespace memprofile
