// Unit tier: synthetic inputs only. The cases on real processes and real preload libraries are
// tests/integration/test_launcher_processes.cpp.
// The in-pod commands that need no profiler: image-setup's config, collect's
// archive and its refusals.
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "support.h"

using nlohmann::json;
using testing::fixture;
using testing::launcher;
using testing::quote;
using testing::RunResult;
using testing::Scratch;

TEST_CASE("image-setup: bakes the app's command from build args into the launcher config") {
  Scratch s;
  RunResult r = testing::run("APP_ENTRYPOINT='[\"/app\",\"--x y\"]' APP_CMD=null BACKEND=heaptrack PROFILE_DIR=/prof " +
                             launcher() + " image-setup --root " + quote(s.path()));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::string conf = testing::read_file(s / "etc/memprofile/exec.conf");
  CHECK_THAT(conf, Catch::Contains("backend = heaptrack\n") && Catch::Contains("output_dir = /prof\n") &&
                       Catch::Contains("entrypoint = [\"/app\",\"--x y\"]\n") && Catch::Contains("cmd = []\n"));
  struct stat st;
  REQUIRE(stat((s / "prof").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 01777);
  RunResult bad = testing::run("APP_ENTRYPOINT='/app --x' " + launcher() + " image-setup --root " + quote(s.path()));
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("not a JSON array of strings"));
  RunResult none = testing::run(launcher() + " image-setup --root " + quote(s.path()));
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.err, Catch::Contains("both empty"));
  RunResult backend = testing::run("APP_CMD='[\"/app\"]' " + launcher() + " image-setup --backend valgrind --root " + quote(s.path()));
  CHECK(backend.exit_code == 2);
}

TEST_CASE("collect: a tar whose manifest verifies, even while the profiler writes") {
  Scratch s;
  testing::make_dirs(s / "out");
  // A stand-in for bytehound's writer: appends until collect has ended
  // (however slow a busy machine makes either), at most 6000 times.
  std::string writer = "(for i in $(seq 1 6000); do [ -e " + quote(s / "done") + " ] && break; head -c 4096 /dev/urandom >> " +
                       quote(s / "out/memory-profiling_app_1_1.dat") + "; sleep 0.05; done) & ";
  RunResult r = testing::run(writer + "sleep 0.2; " + launcher() + " collect --backend bytehound --output-dir " +
                             quote(s / "out") + " --settle 5 --timeout 1 --out " + quote(s / "prof.tar") +
                             "; rc=$?; touch " + quote(s / "done") + "; wait; exit $rc");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("still growing"));
  RunResult v = testing::run(launcher() + " collect --verify " + quote(s / "prof.tar"));
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.out, Catch::Contains("ok      memory-profiling_app_1_1.dat") && Catch::Contains("matches its manifest"));
  // Through a pipe, as `kubectl exec POD -- memprofile collect > prof.tar` does.
  RunResult piped = testing::run(launcher() + " collect --backend bytehound --output-dir " + quote(s / "out") +
                                 " --settle 0.5 | " + launcher() + " collect --verify -");
  CHECK(piped.exit_code == 0);
  // A cut archive does not verify.
  std::string tar = testing::read_file(s / "prof.tar");
  testing::write_file(s / "cut.tar", tar.substr(0, tar.size() / 2));
  RunResult cut = testing::run(launcher() + " collect --verify " + quote(s / "cut.tar"));
  CHECK(cut.exit_code != 0);
}

TEST_CASE("collect: refuses clearly when there is nothing to collect") {
  Scratch s;
  testing::make_dirs(s / "out");
  RunResult r = testing::run(launcher() + " collect --backend jemalloc --output-dir " + quote(s / "out") + " --settle 0.1 --out " +
                             quote(s / "x.tar"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("no jemalloc profile files here yet"));
}

