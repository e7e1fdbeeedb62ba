// Integration tier: exec against the kernel's real argument limit. The cases on synthetic inputs are
// tests/unit/test_collect_exec_bounds.cpp.
// The edges of the in-pod commands: `collect` never following a link out of
// the output directory, `collect --verify` taking every archive collect
// writes and nothing else, and `exec` starting the application even when the
// profiler's settings do not fit in the kernel's argument limit.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "archive_builder.h"
#include "support.h"

extern char** environ;

using nlohmann::json;
using testing::fixture;
using testing::launcher;
using testing::quote;
using testing::RunResult;
using testing::Scratch;

namespace {


// A hand-made archive: `entries` as given, then a manifest listing `listed`
// (name and content) as collect would.
struct Listed {
  std::string name, content;
};

const std::string kProfile = "memory-profiling_app_1_1.dat";

}  // namespace

TEST_CASE("exec: an environment with no room for the profiler's settings runs the program unprofiled") {
  Scratch s;
  // A long output directory makes the added settings (it appears in two of
  // them) several KiB, so the environment can fit without them and not with.
  std::string out = s / "out";
  for (int i = 0; i < 12; ++i) out += "/" + std::string(200, 'o');
  testing::make_dirs(out);
  testing::write_file(s / "exec.conf", "backend = bytehound\npreload = " + fixture("libprobe.so") + "\noutput_dir = " + out +
                                           "\nmin_free_mb = 0\n");
  std::string args = launcher() + " exec --config " + quote(s / "exec.conf") + " -- " + quote(fixture("leak")) +
                     " pidfile " + quote(s / "pid") + " envfile " + quote(s / "env") + " exit 7";
  std::string command = "PROBE_LOG=" + quote(s / "probe.log") + " " + args;

  // The kernel's limit on argv + envp: a quarter of the stack limit, capped
  // at 6 MiB; each string counts with its NUL and a pointer.
  size_t limit = std::min<size_t>(static_cast<size_t>(sysconf(_SC_ARG_MAX)), 6u << 20);
  size_t used = command.size() + 64 * sizeof(char*);  // the launcher's argv, PROBE_LOG, what sh adds
  for (char** e = environ; *e; ++e) used += std::strlen(*e) + 1 + sizeof(char*);
  // Fill to 2 KiB below the limit with strings under MAX_ARG_STRLEN (128 KiB).
  REQUIRE(used + 4096 < limit);
  size_t pad = limit - 2048 - used;
  std::vector<std::string> names;
  for (int i = 0; pad > 0; ++i) {
    std::string name = "MEMPROFILE_TEST_PAD_" + std::to_string(i);
    size_t overhead = name.size() + 2 + sizeof(char*);
    size_t len = pad > overhead ? std::min<size_t>(100000, pad - overhead) : 0;
    setenv(name.c_str(), std::string(len, 'p').c_str(), 1);
    names.push_back(name);
    pad -= std::min(pad, len + overhead);
  }
  RunResult r = testing::run(command);
  for (const auto& n : names) unsetenv(n.c_str());

  INFO(r.err);
  CHECK(r.exit_code == 7);
  CHECK(access((s / "pid").c_str(), F_OK) == 0);
  std::string env = testing::read_file(s / "env");
  CHECK(env.find("MEMPROFILE_TEST_PAD_0=ppp") != std::string::npos);  // the environment is 2 MiB: no CHECK_THAT
  CHECK(env.find("LD_PRELOAD") == std::string::npos);
  CHECK(access((s / "probe.log").c_str(), F_OK) != 0);
  // The start line, then why it could not be kept (a directory this long is
  // also too long for the control socket: that warning comes first).
  auto l = testing::lines(r.err);
  REQUIRE(l.size() == 3);
  CHECK_THAT(l[0], Catch::Contains("no disk budget and no memprofile start/stop/snapshot/status"));
  CHECK_THAT(l[2], Catch::StartsWith("memprofile: error: running unprofiled: ") && Catch::Contains("E2BIG") &&
                       Catch::Contains("ENV_TOO_LARGE"));
}
