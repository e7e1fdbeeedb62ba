#include "source/names.h"

#include "image/file_tree.h"
#include "source/store.h"

namespace memprofile {

std::string clean_name(const std::string& raw) { return normalize_path("/" + raw).substr(1); }

std::string follow_aliases(const std::map<std::string, std::string>& aliases, std::string n) {
  n = clean_name(n);
  for (int i = 0; i < 16; ++i) {
    auto it = aliases.find(n);
    if (it == aliases.end()) return n;
    n = it->second;
  }
  return n;
}

std::string link_target(char type, const std::string& name, const std::string& linkname) {
  // A symlink is relative to its own directory; a hard link to the archive's root.
  if (type == '2') return clean_name(dirname_of("/" + name).substr(1) + "/" + linkname);
  return clean_name(linkname);
}

std::string blob_name(const std::string& digest, const std::string& where) {
  size_t colon = digest.find(':');
  std::string alg = colon == std::string::npos ? "" : digest.substr(0, colon);
  std::string hex = colon == std::string::npos ? "" : digest.substr(colon + 1);
  bool ok = alg == "sha256" && hex.size() == 64 && hex.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!ok) throw FileError(where, "unsupported or malformed digest \"" + digest + "\"");
  return "blobs/sha256/" + hex;
}

FileError too_many_entries(const std::string& where) {
  return FileError(where, "the archive holds more than " + std::to_string(kMaxArchiveEntries) +
                              " entries; an image archive holds a few hundred blobs");
}

}  // namespace memprofile
