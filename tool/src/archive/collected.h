// The archive `memprofile collect` writes: the profile files as a tar, and
// last a manifest (MEMPROFILE-MANIFEST.json) of their names, sizes and
// sha256. Read in one pass: each entry is handed over as it streams (report
// parses profiles from it; collect --verify only hashes), and checked against
// the manifest at the end. Anything collect never writes (a link, a device,
// a name leading out of the directory, a duplicate) is a problem: extracting
// such an archive could write outside the directory or hide a file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/stream.h"

namespace memprofile {

constexpr const char* kCollectManifest = "MEMPROFILE-MANIFEST.json";
constexpr size_t kMaxCollectManifest = 64u << 20;

struct CollectedFile {
  std::string name, sha256;
  uint64_t size = 0;
  std::string mismatch;  // "" when the entry matches its manifest line
};

struct CollectedArchive {
  std::string backend;                // the manifest's
  std::vector<CollectedFile> files;   // as the manifest lists them
  std::vector<std::string> problems;  // entries missing, unlisted, listed twice
  // Entries whose file shrank while collect streamed it: in the tar,
  // zero-filled, listed as skipped with "cut" (collect.h); not profiles.
  std::vector<std::string> cut;
};

// Why a name in an archive is not one collect writes ("" when it is).
std::string collect_bad_name(const std::string& name);

// Reads the archive from `in` (`name` in messages). `on_entry` gets each
// profile entry's name and a reader of its bytes (it may read all, some or
// none). Throws FileError naming `name` for an entry collect never writes or
// a missing or malformed manifest; mismatches are in the result.
CollectedArchive read_collected(Reader& in, const std::string& name,
                                const std::function<void(const std::string& entry, Reader& bytes)>& on_entry);

}  // namespace memprofile
