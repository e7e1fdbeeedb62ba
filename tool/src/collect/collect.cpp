#include "collect/collect.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/stream.h"
#include "collect/collected.h"
#include "collect/profile_dir.h"
#include "collect/tar_writer.h"

namespace memprofile {

using nlohmann::json;

namespace {

std::string make_manifest(Backend backend, const std::string& output_dir, const json& files,
                          const std::map<std::string, std::string>& skipped) {
  json skipped_json = json::array();
  for (const auto& [rel, why] : skipped) skipped_json.push_back({{"name", rel}, {"why", why}});
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
void check_manifest_fits(const CollectRequest& req, const ProfileListing& listing,
                         const std::map<std::string, std::string>& skipped) {
  json preview = json::array();
  for (const auto& [name, size] : listing.files)
    preview.push_back({{"name", name}, {"size", size}, {"sha256", std::string(64, '0')}});
  if (make_manifest(req.backend, req.output_dir, preview, skipped).size() > kMaxCollectManifest)
    throw FileError(req.output_dir, std::to_string(listing.files.size()) +
                                        " files make a manifest larger than --verify accepts; collect fewer at a time");
}

// One file, exactly its listed size even if the profiler appends meanwhile;
// its sha256, or "" when it changed kind since the listing (`why` says how).
std::string copy_file(TarWriter& out, int root, const std::string& dir, const std::string& name, uint64_t size,
                      std::string& why) {
  std::string path = dir + "/" + name;
  UniqueFd file = open_beneath(root, name);
  if (!file && (errno == ELOOP || errno == ENOTDIR)) {
    why = errno == ELOOP ? "replaced by a symbolic link since it was listed, not followed"
                         : "a directory on its path is no longer one (a symbolic link?), not followed";
    return "";
  }
  if (!file) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    why = "no longer a regular file since it was listed";
    return "";
  }
  out.header(name, size);
  Sha256 sha;
  std::vector<char> buf(1 << 16);
  for (uint64_t done = 0; done < size;) {
    ssize_t r = pread(file.get(), buf.data(), std::min<uint64_t>(buf.size(), size - done), static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw FileError(path, "shrank while being copied (" + std::to_string(done) + " of " + std::to_string(size) +
                                " bytes); nothing usable was written");
    sha.update(buf.data(), static_cast<size_t>(r));
    out.write(buf.data(), static_cast<size_t>(r));
    done += static_cast<uint64_t>(r);
  }
  out.pad(size);
  return sha.hex();
}

size_t write_archive(const CollectRequest& req, const Say& say) {
  ProfileListing listing = settled_listing(req, say);
  // One line for each thing not copied, from the final listing only (the
  // earlier ones were provisional), and again in the manifest.
  std::map<std::string, std::string> skipped;
  auto skip = [&](const std::string& rel, const std::string& why) {
    skipped[rel] = why;
    say("warning: skipped " + req.output_dir + "/" + rel + ": " + why);
  };
  for (const auto& [rel, why] : listing.skipped) skip(rel, why);
  if (listing.files.empty())
    throw FileError(req.output_dir, std::string("no ") + to_string(req.backend) + " profile files here yet");
  check_manifest_fits(req, listing, skipped);

  UniqueFd root = open_output_dir(req.output_dir);
  TarWriter out(req.out);
  json files = json::array();
  for (const auto& [name, size] : listing.files) {
    std::string why;
    std::string sha = copy_file(out, root.get(), req.output_dir, name, size, why);
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
