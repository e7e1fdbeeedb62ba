#include "support.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <chrono>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace testing {

namespace {

// Build-time defaults (tests/CMakeLists.txt), overridable from the environment.
std::string setting(const char* name) {
  if (const char* v = std::getenv(name); v && *v) return v;
  static const std::map<std::string, std::string> defaults = {
      {"MEMPROFILE_FIXTURES", MEMPROFILE_FIXTURES_DEFAULT},
      {"MEMPROFILE_IMAGES", MEMPROFILE_IMAGES_DEFAULT},
      {"MEMPROFILE_SCRATCH", MEMPROFILE_SCRATCH_DEFAULT},
      {"MEMPROFILE_BIN", MEMPROFILE_BIN_DEFAULT},
      {"MEMPROFILE_LAUNCHER", MEMPROFILE_LAUNCHER_DEFAULT},
      {"MEMPROFILE_LAUNCHER_ARM64", MEMPROFILE_LAUNCHER_ARM64_DEFAULT},
      {"MEMPROFILE_SOURCE_DIR", MEMPROFILE_SOURCE_DIR_DEFAULT},
  };
  return defaults.at(name);
}

std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return out.substr(0, 80);
}

}  // namespace

std::string fixtures() { return setting("MEMPROFILE_FIXTURES"); }
std::string fixture(const std::string& name) { return fixtures() + "/" + name; }
std::string images() { return setting("MEMPROFILE_IMAGES"); }
std::string memprofile_bin() { return setting("MEMPROFILE_BIN"); }
std::string launcher_bin() { return setting("MEMPROFILE_LAUNCHER"); }
std::string launcher_arm64_bin() { return setting("MEMPROFILE_LAUNCHER_ARM64"); }
std::string source_dir() { return setting("MEMPROFILE_SOURCE_DIR"); }

std::string rootfs(const std::string& arch) {
  static std::mutex mu;
  static std::map<std::string, std::string> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(arch);
  if (it != known.end()) return it->second;
  RunResult r = run(quote(setting("MEMPROFILE_SOURCE_DIR") + "/tests/fixtures/rootfs.sh") + " " + arch);
  if (r.exit_code != 0) throw std::runtime_error("cannot prepare the " + arch + " rootfs: " + r.err);
  std::string dir = r.out.substr(0, r.out.find('\n'));
  known[arch] = dir;
  return dir;
}

std::string launcher() { return quote(launcher_bin()); }

Scratch::Scratch() {
  static std::atomic<int> counter{0};
  std::string base = setting("MEMPROFILE_SCRATCH");
  std::string name = slug(Catch::getResultCapture().getCurrentTestName());
  path_ = base + "/" + name + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  fs::remove_all(path_);
  fs::create_directories(path_);
}

Scratch::~Scratch() {
  std::error_code ec;
  if (!std::getenv("MEMPROFILE_KEEP_SCRATCH")) fs::remove_all(path_, ec);
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

RunResult run(const std::string& command_line) {
  char out_tpl[] = "/tmp/memprofile-test-out-XXXXXX";
  char err_tpl[] = "/tmp/memprofile-test-err-XXXXXX";
  int ofd = mkstemp(out_tpl), efd = mkstemp(err_tpl);
  if (ofd < 0 || efd < 0) throw std::runtime_error("mkstemp failed");
  close(ofd);
  close(efd);
  std::string cmd = "(" + command_line + ") >" + quote(out_tpl) + " 2>" + quote(err_tpl) + " </dev/null";
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.out = read_file(out_tpl);
  r.err = read_file(err_tpl);
  unlink(out_tpl);
  unlink(err_tpl);
  return r;
}

RunResult run_memprofile(const std::vector<std::string>& args) {
  std::string cmd = quote(memprofile_bin());
  for (const auto& a : args) cmd += " " + quote(a);
  return run(cmd);
}

void write_file(const std::string& path, const std::string& bytes, unsigned mode) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  chmod(path.c_str(), mode);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void copy_file(const std::string& from, const std::string& to, unsigned mode) {
  fs::create_directories(fs::path(to).parent_path());
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  chmod(to.c_str(), mode);
}

void symlink_to(const std::string& target, const std::string& link) {
  fs::create_directories(fs::path(link).parent_path());
  fs::remove(link);
  fs::create_symlink(target, link);
}

void make_dirs(const std::string& path) { fs::create_directories(path); }

void make_glibc_root(const std::string& dir, const std::string& arch) {
  std::string src = rootfs(arch);
  std::string triplet = arch == "arm64" ? "aarch64-linux-gnu" : "x86_64-linux-gnu";
  std::string loader = arch == "arm64" ? "ld-linux-aarch64.so.1" : "ld-linux-x86-64.so.2";
  make_dirs(dir + "/usr/lib/" + triplet);
  make_dirs(dir + "/usr/bin");
  make_dirs(dir + "/etc");
  for (const char* link : {"lib", "bin", "lib64"}) {
    std::error_code ec;
    auto target = fs::read_symlink(src + "/" + link, ec);
    if (!ec) symlink_to(target.string(), dir + "/" + link);
  }
  // The loader's absolute symlink in usr/lib64 (amd64) or the lib one (arm64).
  for (const std::string& l : {"/usr/lib64/" + loader, "/usr/lib/" + loader}) {
    std::error_code ec;
    auto target = fs::read_symlink(src + l, ec);
    if (!ec) symlink_to(target.string(), dir + l);
  }
  for (const std::string& lib : {loader, std::string("libc.so.6")})
    copy_file(src + "/usr/lib/" + triplet + "/" + lib, dir + "/usr/lib/" + triplet + "/" + lib);
  copy_file(src + "/etc/ld.so.cache", dir + "/etc/ld.so.cache", 0644);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream s(text);
  for (std::string l; std::getline(s, l);) out.push_back(l);
  return out;
}

EnvGuard::EnvGuard(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) {
    had_ = true;
    old_ = old;
  }
  if (value) setenv(name, value, 1);
  else unsetenv(name);
}

EnvGuard::~EnvGuard() {
  if (had_) setenv(name_.c_str(), old_.c_str(), 1);
  else unsetenv(name_.c_str());
}

namespace {

constexpr double kHangSeconds = 900;

}  // namespace

Bounded run_bounded(const std::vector<std::string>& args, double limit_s, const std::string& input) {
  Scratch s;
  std::string err_path = s / "stderr", rss_path = s / "rss";
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setpgid(0, 0);
    rlimit cpu{static_cast<rlim_t>(limit_s), static_cast<rlim_t>(limit_s) + 5};
    setrlimit(RLIMIT_CPU, &cpu);
    std::vector<std::string> argv = {"/usr/bin/time", "-f", "%M", "-o", rss_path, memprofile_bin()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    FILE* in = freopen(input.c_str(), "r", stdin);
    FILE* out = freopen("/dev/null", "w", stdout);
    FILE* err = freopen(err_path.c_str(), "w", stderr);
    if (!in || !out || !err) _exit(127);
    execv(c[0], c.data());
    _exit(127);
  }
  Bounded b;
  b.limit_s = limit_s;
  int status = 0;
  rusage use{};
  for (;;) {
    pid_t got = wait4(pid, &status, WNOHANG, &use);
    if (got == pid) break;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > kHangSeconds) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      b.err = read_file(err_path);
      return b;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // GNU time's own and memprofile's (reaped by time): the child's tree.
  b.cpu_seconds = static_cast<double>(use.ru_utime.tv_sec + use.ru_stime.tv_sec) +
                  static_cast<double>(use.ru_utime.tv_usec + use.ru_stime.tv_usec) / 1e6;
  b.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  b.err = read_file(err_path);
  // GNU time says "Command exited with non-zero status N" before the number.
  auto rss = lines(read_file(rss_path));
  b.max_rss_kb = rss.empty() ? -1 : std::stol(rss.back());
  return b;
}

void require_bounded(const Bounded& b, long rss_kb) {
  INFO("exit " << b.exit_code << ", " << b.cpu_seconds << " s of CPU (bound " << b.limit_s << " s), "
                << b.max_rss_kb << " KiB; stderr: " << b.err);
  REQUIRE(b.exit_code != -1);  // not hung
  CHECK(b.exit_code < 128);    // no crash (SIGXCPU past the CPU bound is one)
  CHECK(b.cpu_seconds <= b.limit_s);
  CHECK(b.max_rss_kb > 0);
#ifndef __SANITIZE_ADDRESS__  // ASan's shadow memory and quarantine are not memprofile's
  CHECK(b.max_rss_kb <= rss_kb);
#else
  (void)rss_kb;
#endif
}

}  // namespace testing
