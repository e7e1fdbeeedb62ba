#include "profile/profile_in_use.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "base/checked_open.h"
#include "base/error.h"
#include "base/unique_fd.h"
#include "base/units.h"
#include "profile/heap_profile.h"

namespace memprofile {

using nlohmann::json;

namespace {

// Larger dumps are left to report: status answers in seconds.
constexpr uint64_t kStatusDumpLimit = 64ull << 20;

// The dump as a regular file of the process's uid or root, opened without
// blocking or following a link (base/checked_open.h): a FIFO, a device or
// another user's file under the name must not hold or fool status.
std::string read_dump(const std::string& path, long pid) {
  struct stat proc;
  OpenRules rules;
  rules.uid = stat(("/proc/" + std::to_string(pid)).c_str(), &proc) == 0 ? static_cast<long>(proc.st_uid) : 0;
  rules.max_size = kStatusDumpLimit;
  CheckedFile f = open_checked(AT_FDCWD, path, rules);
  if (!f.fd) {
    if (f.why.find(" bytes, over the ") != std::string::npos)
      throw FileError(path, mib(f.size) + ": larger than status reads; memprofile report reads it");
    throw FileError(path, "cannot read it as the process's own file: " + f.why);
  }
  std::string text(static_cast<size_t>(f.size), '\0');
  size_t got = 0;
  for (ssize_t n; got < text.size() && (n = ::read(f.fd.get(), &text[got], text.size() - got)) > 0;) got += static_cast<size_t>(n);
  text.resize(got);
  return text;
}

}  // namespace

ProfileInUse profile_in_use(const json& reply, const std::string& dir) {
  ProfileInUse p;
  const std::string backend = reply.value("backend", std::string());
  if (backend == "none") return p;
  json snaps = reply.value("snapshots", json::array());
  std::vector<const json*> by_age;  // newest first
  for (const auto& s : snaps)
    if (s.is_object()) by_age.push_back(&s);
  std::stable_sort(by_age.begin(), by_age.end(), [](const json* a, const json* b) {
    return a->value("seq", uint64_t{0}) > b->value("seq", uint64_t{0});
  });
  const json* newest = by_age.empty() ? nullptr : by_age.front();
  if (backend != "jemalloc") {
    p.why = backend + " writes one continuous file" +
            (newest ? " (" + newest->value("path", std::string()) + ")" : std::string()) +
            ": memprofile report reads what is in use from it";
    return p;
  }
  if (!newest) {
    p.why = "no snapshot yet (memprofile snapshot, or --snapshot-every)";
    return p;
  }
  // The newest dump jemalloc has finished: one it is still writing (an
  // interval dump, at a fast leak's pace) does not parse yet, and the one
  // before it is the last whole snapshot, which the line then names. One
  // step back only; when neither parses, the newest's error says why.
  for (size_t i = 0; i < std::min<size_t>(by_age.size(), 2); ++i) {
    std::string path = by_age[i]->value("path", std::string());
    std::string file = dir + "/" + path.substr(path.rfind('/') + 1);
    try {
      p.bytes = parse_heap_dump(read_dump(file, reply.value("pid", 0L)), file).total_bytes;
      p.snapshot = file;
      p.known = true;
      p.why.clear();
      return p;
    } catch (const Error& e) {
      if (i > 0) continue;
      p.snapshot = file;
      p.why = e.what();
    }
  }
  return p;
}

}  // namespace memprofile
