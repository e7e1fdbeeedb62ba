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
#include <nlohmann/json.hpp>
#include <thread>

#include "cmd_launcher.h"
#include "error.h"
#include "profiler.h"
#include "stream.h"
#include "tar_reader.h"

namespace memprofile {

using nlohmann::json;

namespace {

constexpr const char* kManifest = "MEMPROFILE-MANIFEST.json";

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
    fd_ = path == "-" ? STDOUT_FILENO : ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw FileError(path, std::string("cannot create: ") + std::strerror(errno));
  }
  ~Output() {
    if (fd_ != STDOUT_FILENO && fd_ >= 0) ::close(fd_);
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
  int fd_;
};

// A ustar header; names here are short (profile file names).
void tar_header(Output& out, const std::string& name, uint64_t size) {
  if (name.size() >= 100) throw Error("file name too long for the archive: " + name);
  char h[512];
  std::memset(h, 0, sizeof h);
  std::memcpy(h, name.data(), name.size());
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(size));
  std::snprintf(h + 136, 12, "%011llo", static_cast<unsigned long long>(std::time(nullptr)));
  h[156] = '0';
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

std::map<std::string, uint64_t> sizes(Backend b, const std::string& dir) {
  std::map<std::string, uint64_t> out;
  DIR* d = opendir(dir.c_str());
  if (!d) throw FileError(dir, std::string("cannot open the output directory: ") + std::strerror(errno));
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    struct stat st;
    if (is_profile_file(b, name) && stat((dir + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode))
      out[name] = static_cast<uint64_t>(st.st_size);
  }
  closedir(d);
  return out;
}

int run_verify(const std::string& path) {
  int fd = path == "-" ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  FdReader in(fd, path);
  TarReader tar(in, path);
  TarEntry e;
  std::map<std::string, std::pair<uint64_t, std::string>> seen;
  std::string manifest;
  std::vector<char> buf(1 << 16);
  while (tar.next(e)) {
    Sha256 sha;
    uint64_t n = 0;
    std::string content;
    for (size_t r; (r = tar.read(buf.data(), buf.size())) > 0;) {
      sha.update(buf.data(), r);
      n += r;
      if (e.name == kManifest && content.size() < (1 << 20)) content.append(buf.data(), r);
    }
    if (e.name == kManifest)
      manifest = content;
    else
      seen[e.name] = {n, sha.hex()};
  }
  if (fd != STDIN_FILENO) ::close(fd);
  if (manifest.empty()) throw FileError(path, std::string("no ") + kManifest + ": not a memprofile collect archive, or cut short");
  json m;
  try {
    m = json::parse(manifest);
  } catch (const json::exception&) {
    throw FileError(path, std::string("malformed ") + kManifest);
  }
  int bad = 0;
  for (const auto& f : m.value("files", json::array())) {
    std::string name = f.value("name", "");
    auto it = seen.find(name);
    std::string why;
    if (it == seen.end())
      why = "missing from the archive";
    else if (it->second.first != f.value("size", uint64_t{0}))
      why = "size " + std::to_string(it->second.first) + ", manifest says " + std::to_string(f.value("size", uint64_t{0}));
    else if (it->second.second != f.value("sha256", ""))
      why = "sha256 differs from the manifest";
    if (why.empty()) {
      std::cout << "ok      " << name << " (" << it->second.first << " bytes)\n";
    } else {
      std::cout << "BAD     " << name << ": " << why << "\n";
      ++bad;
    }
  }
  std::cout << (bad ? "archive does NOT match its manifest" : "archive matches its manifest") << "\n";
  return bad ? kExitNotProfilable : kExitOk;
}

int run_collect(const CollectOptions& o) {
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
    auto last = sizes(backend, cfg.output_dir);
    double stable = 0;
    while (stable < o.settle) {
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (elapsed >= o.timeout) {
        std::cerr << "memprofile: warning: profiles still growing after " << o.timeout
                  << " s; taking a snapshot at their current size\n";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      auto now = sizes(backend, cfg.output_dir);
      stable = now == last ? stable + 0.5 : 0;
      last = now;
    }
    if (last.empty())
      throw FileError(cfg.output_dir, std::string("no ") + to_string(backend) + " profile files here yet");

    Output out(o.out);
    json files = json::array();
    std::vector<char> buf(1 << 16);
    for (const auto& [name, size] : last) {
      std::string path = cfg.output_dir + "/" + name;
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
      // Exactly the snapshot size, even if the profiler appends meanwhile.
      tar_header(out, name, size);
      Sha256 sha;
      uint64_t done = 0;
      while (done < size) {
        ssize_t r = pread(fd, buf.data(), std::min<uint64_t>(buf.size(), size - done), static_cast<off_t>(done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          ::close(fd);
          throw FileError(path, "shrank while being copied (" + std::to_string(done) + " of " + std::to_string(size) +
                                    " bytes); nothing usable was written");
        }
        sha.update(buf.data(), static_cast<size_t>(r));
        out.write(buf.data(), static_cast<size_t>(r));
        done += static_cast<uint64_t>(r);
      }
      ::close(fd);
      tar_padding(out, size);
      files.push_back({{"name", name}, {"size", size}, {"sha256", sha.hex()}});
    }
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    std::string manifest = json{{"backend", to_string(backend)},
                                {"output_dir", cfg.output_dir},
                                {"host", host},
                                {"created", static_cast<int64_t>(std::time(nullptr))},
                                {"files", files}}
                               .dump(2) +
                           "\n";
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
  return kExitOk;
}

}  // namespace

void setup_collect(CLI::App& app, int& exit_code) {
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
