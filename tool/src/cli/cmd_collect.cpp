// `memprofile collect [--out FILE|-]`: stream the profile files out of the
// container as a tar with a manifest of sizes and sha256, for
// `kubectl exec POD -- memprofile collect > prof.tar` (never `kubectl cp`,
// whose tar the profiler would be injected into). `--verify FILE|-` checks
// such a tar on the receiving side.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cmd_launcher.h"
#include "base/error.h"
#include "base/json_text.h"
#include "verdict/profiler.h"
#include "base/stream.h"
#include "base/tar_reader.h"
#include "base/unique_fd.h"
#include "profile/collected.h"

namespace memprofile {

using nlohmann::json;

namespace {

constexpr const char* kManifest = kCollectManifest;

struct CollectOptions {
  std::string out = "-";
  std::string config = kDefaultConfigPath;
  std::string backend, output_dir;
  int pid = 1;
  double settle = 3, timeout = 90;
  bool suspend = false;
  std::string verify;
};

class Output {
 public:
  explicit Output(const std::string& path) : path_(path) {
    if (path != "-") {
      file_ = UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!file_) throw FileError(path, std::string("cannot create: ") + std::strerror(errno));
    }
    fd_ = file_ ? file_.get() : STDOUT_FILENO;
  }
  void write(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd_, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw FileError(path_ == "-" ? "stdout" : path_, std::string("write failed: ") + std::strerror(errno));
      c += w;
      n -= static_cast<size_t>(w);
    }
  }

 private:
  std::string path_;
  UniqueFd file_;  // the file, unless it is stdout
  int fd_;
};

// The manifest is metadata (about 150 bytes a file) that --verify holds
// whole to parse; collect refuses to write one bigger than this, so every
// archive it writes verifies.
constexpr size_t kMaxManifest = kMaxCollectManifest;
// How many directories below the output directory collect descends: a
// profiler writes a level or two; a bound keeps a hostile or runaway tree
// (or a bind mount of /) from walking forever.
constexpr int kMaxDepth = 16;
// ustar's size field: 11 octal digits, 8 GiB - 1.
constexpr uint64_t kMaxOctalSize = 077777777777ull;

std::string pax_record(const std::string& key, const std::string& value) {
  // "LEN key=value\n", where LEN counts its own digits.
  size_t n = key.size() + value.size() + 3, len = n + std::to_string(n).size();
  while (len != n + std::to_string(len).size()) len = n + std::to_string(len).size();
  return std::to_string(len) + " " + key + "=" + value + "\n";
}

void ustar_header(Output& out, const std::string& name, uint64_t size, char type) {
  char h[512];
  std::memset(h, 0, sizeof h);
  std::memcpy(h, name.data(), std::min<size_t>(name.size(), 99));
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  if (size <= kMaxOctalSize) {
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(size));
  } else {  // GNU base-256, for readers that ignore the PAX size
    h[124] = static_cast<char>(0x80);
    for (int i = 11; i >= 1; --i, size >>= 8) h[124 + i] = static_cast<char>(size & 0xff);
  }
  std::snprintf(h + 136, 12, "%011llo", static_cast<unsigned long long>(std::time(nullptr)));
  h[156] = type;
  std::memcpy(h + 257, "ustar\0" "00", 8);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < sizeof h; ++i) sum += static_cast<unsigned char>(h[i]);
  std::snprintf(h + 148, 8, "%06o", sum);
  h[155] = ' ';
  out.write(h, sizeof h);
}

void tar_padding(Output& out, uint64_t size) {
  static const char zeros[512] = {};
  out.write(zeros, (512 - size % 512) % 512);
}

// ustar holds names of 99 bytes and sizes below 8 GiB; nested paths and big
// profiles get a PAX header first (read by every tar and by --verify), or
// the archive would carry a cut name or a wrong size.
void tar_header(Output& out, const std::string& name, uint64_t size) {
  std::string pax;
  if (name.size() >= 100) pax += pax_record("path", name);
  if (size > kMaxOctalSize) pax += pax_record("size", std::to_string(size));
  if (!pax.empty()) {
    ustar_header(out, "././@PaxHeader", pax.size(), 'x');
    out.write(pax.data(), pax.size());
    tar_padding(out, pax.size());
  }
  ustar_header(out, name, size, '0');
}

// What collect found in the output directory: the profiles (relative path
// to size) and everything it would not copy, with why.
struct Snapshot {
  std::map<std::string, uint64_t> files;
  std::map<std::string, std::string> skipped;
};

std::string not_regular(int dirfd, const std::string& name, mode_t mode) {
  if (S_ISLNK(mode)) {
    char target[4096];
    ssize_t n = readlinkat(dirfd, name.c_str(), target, sizeof target - 1);
    return std::string("a symbolic link") + (n >= 0 ? " (-> " + std::string(target, static_cast<size_t>(n)) + ")" : "") +
           ", not followed";
  }
  if (S_ISFIFO(mode)) return "a fifo, not a regular file";
  if (S_ISSOCK(mode)) return "a socket, not a regular file";
  if (S_ISCHR(mode)) return "a character device, not a regular file";
  if (S_ISBLK(mode)) return "a block device, not a regular file";
  return "not a regular file or directory";
}

// Lists `fd` (a directory) into `snap`. Never follows a symlink: the
// profiled application can write into this directory, and a link there must
// not make collect stream out a file from elsewhere (a secret, /proc/...).
void list_dir(Backend b, UniqueFd fd, const std::string& prefix, int depth, Snapshot& snap) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(fdopendir(fd.get()), closedir);
  if (!dir) {
    snap.skipped[prefix] = std::string("cannot list the directory: ") + std::strerror(errno);
    return;
  }
  fd.release();  // the DIR owns it now
  DIR* d = dir.get();
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string rel = prefix + name;
    struct stat st;
    if (fstatat(dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone since readdir
    if (S_ISREG(st.st_mode)) {
      if (is_profile_file(b, name) || is_process_record(name) || is_memory_record(name)) snap.files[rel] = static_cast<uint64_t>(st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      if (depth >= kMaxDepth) {
        snap.skipped[rel + "/"] = "more than " + std::to_string(kMaxDepth) + " directories deep, not descended";
        continue;
      }
      UniqueFd sub(openat(dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub)
        snap.skipped[rel + "/"] = std::string("cannot open the directory: ") + std::strerror(errno);
      else
        list_dir(b, std::move(sub), rel + "/", depth + 1, snap);
    } else {
      snap.skipped[rel] = not_regular(dirfd(d), name, st.st_mode);
    }
  }
}

UniqueFd open_output_dir(const std::string& dir) {
  // The configured directory itself may be a link (a mount elsewhere):
  // only what is inside it is never followed.
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw FileError(dir, std::string("cannot open the output directory: ") + std::strerror(errno));
  return fd;
}

Snapshot snapshot(Backend b, const std::string& dir) {
  Snapshot snap;
  list_dir(b, open_output_dir(dir), "", 0, snap);
  return snap;
}

// Opens `rel` below `root` one component at a time, never following a link:
// an entry swapped for a symlink since the listing fails with ELOOP (or
// ENOTDIR for a directory). O_NONBLOCK: one swapped for a fifo must not hang
// the open; it is then refused as not a regular file.
// Fails with errno set (closing the directories on the way keeps it).
UniqueFd open_beneath(int root, const std::string& rel) {
  UniqueFd dir;  // the directory reached so far below `root`
  size_t start = 0;
  for (size_t slash; (slash = rel.find('/', start)) != std::string::npos; start = slash + 1) {
    UniqueFd sub(openat(dir ? dir.get() : root, rel.substr(start, slash - start).c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) return sub;
    dir = std::move(sub);
  }
  return UniqueFd(
      openat(dir ? dir.get() : root, rel.substr(start).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
}

// Streams the archive (profile/collected.h): each entry's size and sha256
// are taken as it passes (nothing but the manifest is held), so an archive of
// any size verifies in constant memory.
ExitCode run_verify(const std::string& path) {
  UniqueFd file;  // unless it is stdin
  if (path != "-") {
    file = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!file) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  }
  FdReader in(file ? file.get() : STDIN_FILENO, path);
  CollectedArchive archive = read_collected(in, path, [](const std::string&, Reader&) {});
  // One line for each entry the lists disagree on, then exit 2.
  if (!archive.problems.empty()) {
    for (size_t i = 0; i + 1 < archive.problems.size(); ++i)
      std::cerr << "memprofile: " << path << ": " << archive.problems[i] << "\n";
    throw FileError(path, archive.problems.back());
  }
  int bad = 0;
  for (const auto& f : archive.files) {
    if (f.mismatch.empty()) {
      std::cout << "ok      " << f.name << " (" << f.size << " bytes)\n";
    } else {
      std::cout << "BAD     " << f.name << ": " << f.mismatch << "\n";
      ++bad;
    }
  }
  std::cout << (bad ? "archive does NOT match its manifest" : "archive matches its manifest") << "\n";
  return bad ? ExitCode::NotProfilable : ExitCode::Ok;
}

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

ExitCode run_collect(const CollectOptions& o) {
  if (!o.verify.empty()) return run_verify(o.verify);
  LauncherConfig cfg;
  load_launcher_config(o.config, cfg);
  apply_env_overrides(cfg);
  if (!o.backend.empty()) cfg.backend = o.backend;
  if (!o.output_dir.empty()) cfg.output_dir = o.output_dir;
  Backend backend = parse_backend(cfg.backend);
  if (o.out == "-" && isatty(STDOUT_FILENO))
    throw Error("collect writes a tar archive: redirect it (kubectl exec POD -- memprofile collect > profile.tar)");

  // bytehound's SIGUSR1 toggles tracking; it does not flush. Pausing keeps
  // new events out while the files settle and are copied.
  bool suspended = false;
  if (o.suspend && backend == Backend::Bytehound) {
    if (kill(o.pid, SIGUSR1) != 0) throw Error("cannot signal pid " + std::to_string(o.pid) + ": " + std::strerror(errno));
    suspended = true;
    std::cerr << "memprofile: tracking suspended in pid " << o.pid << "\n";
  }
  auto resume = [&] {
    if (suspended && kill(o.pid, SIGUSR1) == 0) std::cerr << "memprofile: tracking resumed in pid " << o.pid << "\n";
    suspended = false;
  };
  try {
    // Wait until the files stop growing: bytehound's writer flushes about
    // every 30 s, so a copy taken mid-flush would be cut.
    auto start = std::chrono::steady_clock::now();
    Snapshot last = snapshot(backend, cfg.output_dir);
    double stable = 0;
    while (stable < o.settle) {
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (elapsed >= o.timeout) {
        std::cerr << "memprofile: warning: profiles still growing after " << o.timeout
                  << " s; taking a snapshot at their current size\n";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      Snapshot now = snapshot(backend, cfg.output_dir);
      stable = now.files == last.files ? stable + 0.5 : 0;
      last = std::move(now);
    }
    // One line for each thing not copied, from the final listing only (the
    // earlier ones were provisional), and again in the manifest.
    std::map<std::string, std::string> skipped;
    auto skip = [&](const std::string& rel, const std::string& why) {
      skipped[rel] = why;
      std::cerr << "memprofile: warning: skipped " << cfg.output_dir << "/" << rel << ": " << why << "\n";
    };
    for (const auto& [rel, why] : last.skipped) skip(rel, why);
    if (last.files.empty())
      throw FileError(cfg.output_dir, std::string("no ") + to_string(backend) + " profile files here yet");

    // Refuse before streaming a tar that --verify would not accept: the
    // manifest grows with the number of files (their sha256 is the same length).
    json preview = json::array();
    for (const auto& [name, size] : last.files)
      preview.push_back({{"name", name}, {"size", size}, {"sha256", std::string(64, '0')}});
    if (make_manifest(backend, cfg.output_dir, preview, skipped).size() > kMaxManifest)
      throw FileError(cfg.output_dir, std::to_string(last.files.size()) +
                                          " files make a manifest larger than --verify accepts; collect fewer at a time");

    UniqueFd root = open_output_dir(cfg.output_dir);
    Output out(o.out);
    json files = json::array();
    std::vector<char> buf(1 << 16);
    for (const auto& [name, size] : last.files) {
      std::string path = cfg.output_dir + "/" + name;
      UniqueFd file = open_beneath(root.get(), name);
      if (!file && (errno == ELOOP || errno == ENOTDIR)) {
        skip(name, errno == ELOOP ? "replaced by a symbolic link since it was listed, not followed"
                                  : "a directory on its path is no longer one (a symbolic link?), not followed");
        continue;
      }
      if (!file) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
      struct stat st;
      if (fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        skip(name, "no longer a regular file since it was listed");
        continue;
      }
      // Exactly the snapshot size, even if the profiler appends meanwhile.
      tar_header(out, name, size);
      Sha256 sha;
      uint64_t done = 0;
      while (done < size) {
        ssize_t r = pread(file.get(), buf.data(), std::min<uint64_t>(buf.size(), size - done), static_cast<off_t>(done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          throw FileError(path, "shrank while being copied (" + std::to_string(done) + " of " + std::to_string(size) +
                                    " bytes); nothing usable was written");
        }
        sha.update(buf.data(), static_cast<size_t>(r));
        out.write(buf.data(), static_cast<size_t>(r));
        done += static_cast<uint64_t>(r);
      }
      tar_padding(out, size);
      files.push_back({{"name", name}, {"size", size}, {"sha256", sha.hex()}});
    }
    std::string manifest = make_manifest(backend, cfg.output_dir, files, skipped);
    if (manifest.size() > kMaxManifest)  // only if many were skipped since the check above
      throw FileError(cfg.output_dir, "the manifest grew larger than --verify accepts; collect again");
    tar_header(out, kManifest, manifest.size());
    out.write(manifest.data(), manifest.size());
    tar_padding(out, manifest.size());
    static const char end[1024] = {};
    out.write(end, sizeof end);
    std::cerr << "memprofile: collected " << files.size() << " file(s) from " << cfg.output_dir << "\n";
  } catch (...) {
    resume();
    throw;
  }
  resume();
  return ExitCode::Ok;
}

}  // namespace

void setup_collect(CLI::App& app, ExitCode& exit_code) {
  auto o = std::make_shared<CollectOptions>();
  CLI::App* cmd = app.add_subcommand("collect", "Stream the profile files out as a tar with a verified manifest");
  cmd->add_option("--out", o->out, "where to write the tar (- for stdout)")->capture_default_str();
  cmd->add_option("--config", o->config, "launcher config file")->capture_default_str();
  cmd->add_option("--backend", o->backend, "bytehound, jemalloc or heaptrack");
  cmd->add_option("--output-dir", o->output_dir, "where the profiles are written");
  cmd->add_option("--pid", o->pid, "the profiled process, for --suspend")->capture_default_str();
  cmd->add_option("--settle", o->settle, "seconds the files must stop growing before the copy")->capture_default_str();
  cmd->add_option("--timeout", o->timeout, "most seconds to wait for them to settle")->capture_default_str();
  cmd->add_flag("--suspend", o->suspend, "bytehound: pause tracking (SIGUSR1) around the copy, resume after");
  cmd->add_option("--verify", o->verify, "check a collected tar (or - for stdin) against its manifest");
  cmd->callback([o, &exit_code] { exit_code = run_collect(*o); });
}

}  // namespace memprofile
