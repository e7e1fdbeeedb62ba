#include "archive/collect.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/stream.h"
#include "archive/collected.h"
#include "archive/profile_dir.h"
#include "archive/tar_writer.h"
#include "runtime/control_client.h"

namespace memprofile {

using nlohmann::json;

namespace {

// What collect left out of the archive, and why; `cut`: its entry is in
// the tar, zero-filled past where the file shrank.
struct Skip {
  std::string why;
  bool cut = false;
};
using Skipped = std::map<std::string, Skip>;

std::string make_manifest(Backend backend, const std::string& output_dir, const json& files, const Skipped& skipped) {
  json skipped_json = json::array();
  for (const auto& [rel, skip] : skipped) {
    json one = {{"name", rel}, {"why", skip.why}};
    if (skip.cut) one["cut"] = true;
    skipped_json.push_back(std::move(one));
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return json{{"backend", to_string(backend)},
              {"output_dir", output_dir},
              {"host", host},
              {"created", static_cast<int64_t>(std::time(nullptr))},
              {"files", files},
              {"skipped", skipped_json}}
             .dump(2) +
         "\n";
}

// Lists the directory until the files stop growing for `settle` seconds:
// bytehound's writer flushes about every 30 s, so a copy taken mid-flush
// would be cut.
ProfileListing settled_listing(const CollectRequest& req, const Say& say) {
  auto start = std::chrono::steady_clock::now();
  ProfileListing last = list_profiles(req.backend, req.output_dir);
  for (double stable = 0; stable < req.settle;) {
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed >= req.timeout) {
      std::ostringstream line;
      line << "warning: profiles still growing after " << req.timeout << " s; taking a snapshot at their current size";
      say(line.str());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ProfileListing now = list_profiles(req.backend, req.output_dir);
    stable = now.files == last.files ? stable + 0.5 : 0;
    last = std::move(now);
  }
  return last;
}

// Refuse before streaming a tar that --verify would not accept: the
// manifest grows with the number of files (their sha256 is the same length).
void check_manifest_fits(const CollectRequest& req, const ProfileListing& listing, const Skipped& skipped) {
  json preview = json::array();
  for (const auto& [name, size] : listing.files)
    preview.push_back({{"name", name}, {"size", size}, {"sha256", std::string(64, '0')}});
  if (make_manifest(req.backend, req.output_dir, preview, skipped).size() > kMaxCollectManifest)
    throw FileError(req.output_dir, std::to_string(listing.files.size()) +
                                        " files make a manifest larger than --verify accepts; collect fewer at a time");
}

std::string base_of(const std::string& rel) { return rel.substr(rel.rfind('/') + 1); }

// The uids the tree's processes run as (collect.h): a file owned by any
// other uid is not the tree's.
std::set<uid_t> tree_uids(const std::string& dir, const ProfileListing& listing) {
  std::set<uid_t> uids{0, getuid()};
  std::set<long> pids;
  try {
    for (long p : socket_pids(dir)) pids.insert(p);
  } catch (const Error&) {
  }
  std::map<long, std::string> records;
  for (const auto& [rel, size] : listing.files)
    if (is_process_record(base_of(rel))) records[output_file_pid(base_of(rel))] = rel;
  for (const auto& [pid, rel] : records) pids.insert(pid);
  for (long pid : pids) {
    struct stat st;
    if (stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0) {
      uids.insert(st.st_uid);
    } else if (auto r = records.find(pid); r != records.end() && lstat((dir + "/" + r->second).c_str(), &st) == 0) {
      uids.insert(st.st_uid);  // ended: its record's owner is who it ran as
    }
  }
  return uids;
}

// The bytes of the first `size` of `fd` that hold data, not holes (SEEK_DATA
// and SEEK_HOLE: the file's own extents, whatever the filesystem reports in
// st_blocks, which ZFS updates late and counts compressed). Past 4096
// extents, or where the filesystem cannot say, all of it.
uint64_t data_bytes(int fd, uint64_t size) {
  uint64_t data = 0;
  off_t at = 0;
  for (int n = 0; n < 4096; ++n) {
    if (static_cast<uint64_t>(at) >= size) return data;
    off_t start = lseek(fd, at, SEEK_DATA);
    if (start < 0) return errno == ENXIO ? data : size;  // only a hole is left, or it cannot say
    off_t end = lseek(fd, start, SEEK_HOLE);
    if (end < 0 || end <= start) return size;
    data += static_cast<uint64_t>(std::min<off_t>(end, static_cast<off_t>(size)) - std::min<off_t>(start, static_cast<off_t>(size)));
    at = end;
  }
  return size;
}

// Why a listed file is left out before any byte of it is written ("" when
// it is carried): it changed since the listing, is not the tree's, is
// sparse, or would pass the budget.
std::string refuse_file(int fd, const struct stat& st, uint64_t size, const std::set<uid_t>& uids, uint64_t carried,
                        uint64_t max_bytes) {
  if (!S_ISREG(st.st_mode)) return "no longer a regular file since it was listed";
  if (static_cast<uint64_t>(st.st_size) < size)
    return "shrank since it was listed (from " + std::to_string(size) + " to " + std::to_string(st.st_size) + " bytes)";
  if (!uids.count(st.st_uid))
    return "owned by uid " + std::to_string(st.st_uid) + ", which no process of the tree runs as";
  const uint64_t data = data_bytes(fd, size);
  if (size > 16 * data && size - data > (1u << 20))
    return "sparse: " + std::to_string(size) + " bytes long but " + std::to_string(data) +
           " of data, the rest holes; profilers write their files densely (planted?)";
  if (max_bytes && carried + size > max_bytes)
    return "past the budget: " + std::to_string(carried) + " bytes carried already, of at most " +
           std::to_string(max_bytes) + " (the profiles' disk budget)";
  return "";
}

// Reads [0, size) of `fd` into `buf` (as much as there is): how much.
uint64_t read_at_most(int fd, char* buf, uint64_t size, uint64_t from) {
  uint64_t done = 0;
  while (done < size) {
    ssize_t r = pread(fd, buf + done, size - done, static_cast<off_t>(from + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += static_cast<uint64_t>(r);
  }
  return done;
}

// One file, exactly its listed size even if the profiler appends meanwhile:
// its sha256, or "" when it was left out (`skip` says why; `skip.cut` when
// its entry was written and zero-filled).
std::string copy_file(TarWriter& out, int root, const std::string& name, uint64_t size, const std::set<uid_t>& uids,
                      uint64_t& carried, uint64_t max_bytes, Skip& skip) {
  UniqueFd file = open_beneath(root, name);
  if (!file) {
    skip.why = errno == ELOOP    ? "replaced by a symbolic link since it was listed, not followed"
               : errno == ENOTDIR ? "a directory on its path is no longer one (a symbolic link?), not followed"
               : errno == ENOENT  ? "gone since it was listed (rotated by the budget, or removed)"
                                  : std::string("cannot open: ") + std::strerror(errno);
    return "";
  }
  struct stat st;
  if (fstat(file.get(), &st) != 0) {
    skip.why = std::string("cannot stat: ") + std::strerror(errno);
    return "";
  }
  if (skip.why = refuse_file(file.get(), st, size, uids, carried, max_bytes); !skip.why.empty()) return "";
  Sha256 sha;
  if (size <= kSpoolBytes) {
    // Read whole first: what the entry holds is what was read.
    std::string whole(static_cast<size_t>(size), '\0');
    if (uint64_t got = read_at_most(file.get(), whole.data(), size, 0); got < size) {
      skip.why = "shrank while it was read (" + std::to_string(got) + " of " + std::to_string(size) + " bytes)";
      return "";
    }
    out.header(name, size);
    sha.update(whole.data(), whole.size());
    out.write(whole.data(), whole.size());
  } else {
    out.header(name, size);
    std::vector<char> buf(1 << 16);
    for (uint64_t done = 0; done < size;) {
      uint64_t got = read_at_most(file.get(), buf.data(), std::min<uint64_t>(buf.size(), size - done), done);
      if (got == 0) {
        // The header promised `size` bytes: zeros keep the tar whole, and
        // the manifest leaves the entry out.
        skip.why = "shrank while it was copied (" + std::to_string(done) + " of " + std::to_string(size) +
                   " bytes); its entry is zero-filled and left out";
        skip.cut = true;
        std::fill(buf.begin(), buf.end(), '\0');
        for (; done < size; done += std::min<uint64_t>(buf.size(), size - done))
          out.write(buf.data(), static_cast<size_t>(std::min<uint64_t>(buf.size(), size - done)));
        break;
      }
      sha.update(buf.data(), static_cast<size_t>(got));
      out.write(buf.data(), static_cast<size_t>(got));
      done += got;
    }
  }
  out.pad(size);
  carried += size;
  return skip.cut ? "" : sha.hex();
}

size_t write_archive(const CollectRequest& req, const Say& say) {
  ProfileListing listing = settled_listing(req, say);
  // One line for each thing not copied, from the final listing only (the
  // earlier ones were provisional), and again in the manifest.
  Skipped skipped;
  auto skip = [&](const std::string& rel, const Skip& why) {
    skipped[rel] = why;
    say("warning: skipped " + req.output_dir + "/" + rel + ": " + why.why);
  };
  for (const auto& [rel, why] : listing.skipped) skip(rel, Skip{why});
  if (listing.files.empty())
    throw FileError(req.output_dir, std::string("no ") + to_string(req.backend) + " profile files here yet");
  check_manifest_fits(req, listing, skipped);

  const std::set<uid_t> uids = tree_uids(req.output_dir, listing);
  UniqueFd root = open_output_dir(req.output_dir);
  TarWriter out(req.out);
  json files = json::array();
  uint64_t carried = 0;
  for (const auto& [name, size] : listing.files) {
    Skip why;
    std::string sha = copy_file(out, root.get(), name, size, uids, carried, req.max_bytes, why);
    if (sha.empty())
      skip(name, why);
    else
      files.push_back({{"name", name}, {"size", size}, {"sha256", sha}});
  }
  std::string manifest = make_manifest(req.backend, req.output_dir, files, skipped);
  if (manifest.size() > kMaxCollectManifest)  // only if many were skipped since the check above
    throw FileError(req.output_dir, "the manifest grew larger than --verify accepts; collect again");
  out.entry(kCollectManifest, manifest);
  out.finish();
  return files.size();
}

}  // namespace

size_t collect_profiles(const CollectRequest& req, const Say& say) {
  // bytehound's SIGUSR1 toggles tracking; it does not flush. Pausing keeps
  // new events out while the files settle and are copied.
  bool suspended = false;
  if (req.suspend_pid) {
    if (kill(req.suspend_pid, SIGUSR1) != 0)
      throw Error("cannot signal pid " + std::to_string(req.suspend_pid) + ": " + std::strerror(errno));
    suspended = true;
    say("tracking suspended in pid " + std::to_string(req.suspend_pid));
  }
  auto resume = [&] {
    if (suspended && kill(req.suspend_pid, SIGUSR1) == 0) say("tracking resumed in pid " + std::to_string(req.suspend_pid));
    suspended = false;
  };
  try {
    size_t n = write_archive(req, say);
    resume();
    return n;
  } catch (...) {
    resume();
    throw;
  }
}

}  // namespace memprofile
