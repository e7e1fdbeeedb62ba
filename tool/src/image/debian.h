// What an image's Debian package database says, read from the tree: the
// release (/etc/os-release) and the packages dpkg has installed
// (/var/lib/dpkg/status, or distroless' /var/lib/dpkg/status.d/*). The
// memray image build asks it whether the image's Python is Debian's and what
// Debian's python3-memray would still need there.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "image/file_tree.h"

namespace memprofile {

struct DebianPackage {
  std::string name, version, architecture, multi_arch, provides;
  // The whole stanza, as dpkg wrote it: apt merges an installed package with
  // the index's only when their relations match, so a status written for
  // apt from these facts must carry them all.
  std::string stanza;
};

struct DebianSystem {
  std::string id;                       // os-release's ID: "debian", "ubuntu", ...
  std::string codename;                 // VERSION_CODENAME ("trixie"), "" when os-release has none
  std::vector<DebianPackage> installed;  // whose files are in the tree (not config-files, not-installed), in order
  bool complete = true;                 // false: a status file was too large to read whole
  const DebianPackage* find(const std::string& name) const;
};

// The tree's Debian system; nullopt when it has no dpkg database (not
// Debian, or Debian's files removed).
std::optional<DebianSystem> debian_system(const FileTree& tree);

// The installed package whose file list (/var/lib/dpkg/info/NAME.list, or
// NAME:ARCH.list) holds `path`; "" when none does, or the tree has no dpkg
// database. Reads at most 8192 lists of at most 8 MiB each.
std::string debian_package_of(const FileTree& tree, const std::string& path);

// The installed packages of one dpkg status text, in its order. Bounded by
// the text's size.
std::vector<DebianPackage> parse_dpkg_status(const std::string& text);

}  // namespace memprofile
