// Shared helpers for the tests: where the fixtures are, a scratch directory
// per test, and running the real memprofile binary.
#pragma once

#include <string>
#include <vector>

namespace testing {

// Directory of ELF fixtures built by tests/fixtures/build.sh.
std::string fixtures();
std::string fixture(const std::string& name);
// Container images built by tests/fixtures/images.sh.
std::string images();
// An extracted Debian minbase root filesystem ("amd64" or "arm64").
std::string rootfs(const std::string& arch);
// The memprofile binary under test.
std::string memprofile_bin();
// The binary that goes into images (static); the dynamic one in sanitizer builds.
std::string launcher_bin();
// The same, quoted for a shell command line: what every launcher test runs.
std::string launcher();
// The static launcher cross-built for arm64.
std::string launcher_arm64_bin();
// The repository checkout.
std::string source_dir();

// A fresh, empty directory for the current test, removed on destruction.
class Scratch {
 public:
  Scratch();
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// Sets (or unsets, with nullptr) an environment variable for a scope.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value);
  ~EnvGuard();
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

// memprofile run under bounds (tests/unit/test_bounds.cpp says why these):
// at most `limit_s` seconds of CPU time (RLIMIT_CPU), its peak RSS from
// GNU time's wait4 on it (a process forked from the tests would count
// their pages: Linux keeps the pre-exec high-water mark in ru_maxrss), and
// a child blocked for good killed after 900 s of wall time.
struct Bounded {
  int exit_code = -1;  // -1: killed as hung
  long max_rss_kb = 0;
  double cpu_seconds = 0, limit_s = 0;
  std::string err;
};
Bounded run_bounded(const std::vector<std::string>& args, double limit_s, const std::string& input = "/dev/null");
// Not hung, not crashed, within its CPU bound, and (outside sanitizer
// builds, whose shadow memory and quarantine are not memprofile's) at most
// `rss_kb` KiB at its peak.
void require_bounded(const Bounded& b, long rss_kb);
// Runs a shell command line, capturing stdout and stderr.
RunResult run(const std::string& command_line);
// Runs memprofile with the given arguments (each shell-quoted).
RunResult run_memprofile(const std::vector<std::string>& args);
std::string quote(const std::string& s);

void write_file(const std::string& path, const std::string& bytes, unsigned mode = 0644);
std::string read_file(const std::string& path);
void copy_file(const std::string& from, const std::string& to, unsigned mode = 0755);
void symlink_to(const std::string& target, const std::string& link);
void make_dirs(const std::string& path);

// A minimal root made from the real Debian rootfs: the loader, libc and the
// merged-/usr symlinks (lib, lib64 -> usr/lib64 -> absolute link to the
// loader), plus /etc/ld.so.cache. Tests add their own binaries to it.
void make_glibc_root(const std::string& dir, const std::string& arch = "amd64");

std::vector<std::string> lines(const std::string& text);

}  // namespace testing
