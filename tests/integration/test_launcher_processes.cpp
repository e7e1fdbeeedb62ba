// Integration tier: real processes and real preload libraries. The cases on synthetic inputs are
// tests/unit/test_launcher.cpp.
// The launcher and the in-pod commands, with real processes and real
// preload libraries: the tests' probe library, Debian's libjemalloc2 and
// heaptrack's preload library.
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

namespace {

const char* kJemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
const char* kHeaptrack = "/usr/lib/heaptrack/libheaptrack_preload.so";


// memprofile exec with the probe library, output in s/out.
// The control library built beside the launcher under test (ctl/).
std::string ctl_library() {
  std::string l = testing::launcher_bin();
  std::string build = l.substr(0, l.rfind('/', l.rfind('/') - 1));
  return build + "/ctl/libmemprofile_ctl.so";
}

std::string exec_probe(const Scratch& s, const std::string& extra = "") {
  return "PROBE_LOG=" + quote(s / "probe.log") + " MEMPROFILE_CTL_LIBRARY=" + quote(ctl_library()) + " " + launcher() +
         " exec --backend jemalloc --preload " +
         quote(fixture("libprobe.so")) + " --output-dir " + quote(s / "out") + " " + extra + " -- ";
}

std::vector<std::string> probe_lines(const Scratch& s) { return testing::lines(testing::read_file(s / "probe.log")); }

bool wait_for_file(const std::string& path, double seconds = 10) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (access(path.c_str(), F_OK) == 0 && !testing::read_file(path).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

TEST_CASE("exec: the target gets the preload library; a separately started process does not") {
  Scratch s;
  testing::make_dirs(s / "out");
  RunResult r = testing::run(exec_probe(s) + quote(fixture("leak")) + " pidfile " + quote(s / "pid") + " envfile " +
                             quote(s / "env") + "; env > " + quote(s / "other-env"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto l = probe_lines(s);
  REQUIRE(l.size() == 1);  // the application only: not the launcher, not the shell after it
  std::string pid = testing::lines(testing::read_file(s / "pid")).at(0);
  CHECK(l[0] == pid + " " + fixture("leak"));
  std::string env = testing::read_file(s / "env");
  CHECK_THAT(env, Catch::Contains("LD_PRELOAD=" + fixture("libprobe.so")));
  CHECK_THAT(env, Catch::Contains("MALLOC_CONF=prof:true") && Catch::Contains("prof_prefix:" + s / "out/jeprof"));
  // The stand-in for `kubectl exec`: started beside the launcher, not through it.
  CHECK_THAT(testing::read_file(s / "other-env"), !Catch::Contains("LD_PRELOAD"));
  CHECK_THAT(r.err, Catch::Contains("info: profiling " + fixture("leak") + " with jemalloc"));
}

TEST_CASE("exec: a variable the user already set wins") {
  Scratch s;
  testing::make_dirs(s / "out");
  RunResult r = testing::run("MALLOC_CONF=narenas:1 " + exec_probe(s) + quote(fixture("leak")) + " envfile " + quote(s / "env"));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(testing::read_file(s / "env"), Catch::Contains("MALLOC_CONF=narenas:1\n"));
}

TEST_CASE("exec: a dispatcher chain reaches the real target, bytehound keeps LD_PRELOAD across exec") {
  Scratch s;
  testing::make_dirs(s / "out");
  // A copy of the test app plays the dispatcher: it execs the real program.
  testing::copy_file(fixture("leak"), s / "dispatcher");
  std::string cmd = "PROBE_LOG=" + quote(s / "probe.log") + " " + launcher() + " exec --backend bytehound --preload " +
                    quote(fixture("libprobe.so")) + " --output-dir " + quote(s / "out") + " --target " +
                    quote(fixture("leak")) + " -- " + quote(s / "dispatcher") + " exec " + quote(fixture("leak")) +
                    " envfile " + quote(s / "env");
  RunResult r = testing::run(cmd);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto l = probe_lines(s);  // the dispatcher, then the program it exec'd
  REQUIRE(l.size() == 2);
  CHECK_THAT(l[0], Catch::EndsWith(" " + s / "dispatcher"));
  CHECK_THAT(l[1], Catch::EndsWith(" " + fixture("leak")));
  std::string env = testing::read_file(s / "env");
  CHECK_THAT(env, Catch::Contains("MEMORY_PROFILER_TRACK_CHILD_PROCESSES=1"));
  CHECK_THAT(env, Catch::Contains("MEMORY_PROFILER_OUTPUT=" + s / "out/memory-profiling_%e_%t_%p.dat"));
  CHECK_THAT(env, Catch::Contains("MEMORY_PROFILER_LOGFILE="));
}

TEST_CASE("exec: a static target runs unprofiled with one ERROR line; --strict refuses") {
  Scratch s;
  testing::make_dirs(s / "out");
  RunResult r = testing::run(exec_probe(s) + quote(fixture("leak-static")) + " pidfile " + quote(s / "pid"));
  CHECK(r.exit_code == 0);
  auto err = testing::lines(r.err);
  REQUIRE(err.size() == 1);
  CHECK_THAT(err[0], Catch::StartsWith("memprofile: error: running unprofiled: ") && Catch::Contains("STATIC_BINARY") &&
                         Catch::Contains("fix: "));
  CHECK(wait_for_file(s / "pid", 1));
  CHECK(probe_lines(s).empty());
  RunResult strict = testing::run(exec_probe(s, "--strict") + quote(fixture("leak-static")) + " pidfile " + quote(s / "pid2"));
  CHECK(strict.exit_code == 3);
  CHECK_THAT(strict.err, Catch::Contains("refusing to start"));
  CHECK(access((s / "pid2").c_str(), F_OK) != 0);
  RunResult env = testing::run("MEMPROFILE_STRICT=1 " + exec_probe(s) + quote(fixture("leak-static")));
  CHECK(env.exit_code == 3);
}

TEST_CASE("exec: the launcher's pid is the application's, no wrapper stays") {
  Scratch s;
  testing::make_dirs(s / "out");
  RunResult r = testing::run(exec_probe(s) + quote(fixture("leak")) + " pidfile " + quote(s / "pid") +
                             " sleep 0.3 & echo $! > " + quote(s / "launcher-pid") + "; wait");
  REQUIRE(r.exit_code == 0);
  CHECK(testing::read_file(s / "pid") == testing::read_file(s / "launcher-pid"));
}

TEST_CASE("exec: exit codes and SIGTERM pass through") {
  Scratch s;
  testing::make_dirs(s / "out");
  CHECK(testing::run(exec_probe(s) + quote(fixture("leak")) + " exit 7").exit_code == 7);
  RunResult r = testing::run(exec_probe(s) + quote(fixture("leak")) + " pidfile " + quote(s / "pid") +
                             " sleep 30 & p=$!; while [ ! -s " + quote(s / "pid") + " ]; do sleep 0.05; done; kill -TERM $p; wait $p");
  CHECK(r.exit_code == 42);  // the program's own SIGTERM handler
}

TEST_CASE("exec: missing, read-only and nearly full output directories") {
  Scratch s;
  RunResult missing = testing::run(exec_probe(s) + quote(fixture("leak")) + " exit 0");
  CHECK(missing.exit_code == 0);
  CHECK_THAT(missing.err, Catch::Contains("OUTPUT_DIR_MISSING"));
  CHECK(probe_lines(s).empty());

  testing::make_dirs(s / "out");
  REQUIRE(mount("tmpfs", (s / "out").c_str(), "tmpfs", MS_RDONLY, "size=1m") == 0);
  RunResult ro = testing::run(exec_probe(s) + quote(fixture("leak")) + " exit 0");
  umount((s / "out").c_str());
  CHECK(ro.exit_code == 0);
  CHECK_THAT(ro.err, Catch::Contains("OUTPUT_DIR_NOT_WRITABLE"));

  REQUIRE(mount("tmpfs", (s / "out").c_str(), "tmpfs", 0, "size=2m") == 0);
  RunResult full = testing::run(exec_probe(s, "--min-free-mb 16") + quote(fixture("leak")) + " exit 0");
  RunResult roomy = testing::run(exec_probe(s, "--min-free-mb 1") + quote(fixture("leak")) + " exit 0");
  umount((s / "out").c_str());
  CHECK_THAT(full.err, Catch::Contains("OUTPUT_DIR_FULL") && Catch::Contains("floor 16 MiB"));
  CHECK_THAT(roomy.err, !Catch::Contains("error"));
  CHECK(probe_lines(s).size() == 1);  // only the roomy run was profiled
}

TEST_CASE("exec: MEMPROFILE_DISABLE=1 runs unprofiled without a rebuild") {
  Scratch s;
  testing::make_dirs(s / "out");
  RunResult r = testing::run("MEMPROFILE_DISABLE=1 " + exec_probe(s) + quote(fixture("leak")) + " envfile " + quote(s / "env"));
  CHECK(r.exit_code == 0);
  CHECK(probe_lines(s).empty());
  CHECK_THAT(testing::read_file(s / "env"), !Catch::Contains("LD_PRELOAD"));
}

TEST_CASE("exec: one structured JSON start line") {
  Scratch s;
  testing::make_dirs(s / "out");
  RunResult r = testing::run(exec_probe(s, "--log-format json") + quote(fixture("leak")));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto l = testing::lines(r.err);
  REQUIRE(l.size() == 1);
  json j = json::parse(l[0]);
  CHECK(j["event"] == "start");
  CHECK(j["level"] == "info");
  CHECK(j["backend"] == "jemalloc");
  CHECK(j["library"] == fixture("libprobe.so"));
  CHECK(j["target"] == fixture("leak"));
  CHECK(j["output_dir"] == s / "out");
  CHECK(j["control"] == true);
  CHECK(j["dormant"] == false);
}

TEST_CASE("exec: a baked-in config file sets the defaults, flags override it") {
  Scratch s;
  testing::make_dirs(s / "out");
  testing::write_file(s / "exec.conf", "# memprofile launcher\nbackend = heaptrack\npreload = " + fixture("libprobe.so") +
                                           "\noutput_dir = " + s / "out" + "\n");
  RunResult r = testing::run("PROBE_LOG=" + quote(s / "probe.log") + " " + launcher() + " exec --config " +
                             quote(s / "exec.conf") + " -- " + quote(fixture("leak")) + " envfile " + quote(s / "env"));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(testing::read_file(s / "env"), Catch::Contains("DUMP_HEAPTRACK_OUTPUT=" + s / "out/heaptrack.$$.raw"));
  testing::write_file(s / "bad.conf", "colour = blue\n");
  RunResult bad = testing::run("PROBE_LOG=" + quote(s / "probe.log") + " " + launcher() + " exec --config " +
                               quote(s / "bad.conf") + " -- " + quote(fixture("leak")));
  CHECK(bad.exit_code == 0);  // a bad config never takes the service down
  CHECK_THAT(bad.err, Catch::Contains("unknown key 'colour'"));
}

TEST_CASE("exec --from-config: the config's entrypoint with its cmd, or with the arguments given") {
  Scratch s;
  testing::make_dirs(s / "out");
  testing::write_file(s / "exec.conf", "preload = " + fixture("libprobe.so") + "\noutput_dir = " + s / "out" +
                                           "\nentrypoint = [" + json(fixture("leak")).dump() + "]\ncmd = [\"envfile\", " +
                                           json(s / "from-cmd").dump() + "]\n");
  std::string base = "PROBE_LOG=" + quote(s / "probe.log") + " " + launcher() + " exec --config " + quote(s / "exec.conf") +
                     " --from-config --";
  RunResult r = testing::run(base);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(testing::read_file(s / "from-cmd"), Catch::Contains("LD_PRELOAD=" + fixture("libprobe.so")));
  RunResult args = testing::run(base + " envfile " + quote(s / "from-args"));
  REQUIRE(args.exit_code == 0);
  CHECK(access((s / "from-args").c_str(), F_OK) == 0);
  testing::write_file(s / "bad.conf", "entrypoint = " + fixture("leak") + "\n");
  RunResult bad = testing::run(launcher() + " exec --config " + quote(s / "bad.conf") + " --from-config --");
  CHECK(bad.exit_code == 3);  // nothing to start: the app's command is unknown
  CHECK_THAT(bad.err, Catch::Contains("must be a JSON array of strings"));
  testing::write_file(s / "empty.conf", "backend = jemalloc\n");
  RunResult empty = testing::run(launcher() + " exec --config " + quote(s / "empty.conf") + " --from-config");
  CHECK(empty.exit_code == 2);
  CHECK_THAT(empty.err, Catch::Contains("has no entrypoint or cmd"));
}

TEST_CASE("exec: MEMPROFILE_* variables override the config file, flags override them") {
  Scratch s;
  testing::make_dirs(s / "conf-out");
  testing::make_dirs(s / "env-out");
  testing::make_dirs(s / "flag-out");
  testing::write_file(s / "exec.conf", "backend = heaptrack\npreload = " + fixture("libprobe.so") + "\noutput_dir = " +
                                           s / "conf-out" + "\n");
  std::string base = "PROBE_LOG=" + quote(s / "probe.log") + " MEMPROFILE_BACKEND=jemalloc MEMPROFILE_OUTPUT_DIR=" +
                     quote(s / "env-out") + " " + launcher() + " exec --config " + quote(s / "exec.conf");
  RunResult r = testing::run(base + " -- " + quote(fixture("leak")) + " envfile " + quote(s / "env"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(testing::read_file(s / "env"), Catch::Contains("prof_prefix:" + s / "env-out/jeprof"));
  RunResult f = testing::run(base + " --output-dir " + quote(s / "flag-out") + " -- " + quote(fixture("leak")) + " envfile " +
                             quote(s / "env2"));
  REQUIRE(f.exit_code == 0);
  CHECK_THAT(testing::read_file(s / "env2"), Catch::Contains("prof_prefix:" + s / "flag-out/jeprof"));
  RunResult bad = testing::run("MEMPROFILE_BACKEND=valgrind " + launcher() + " exec --strict --config " +
                               quote(s / "exec.conf") + " -- /bin/true");
  CHECK(bad.exit_code == 3);
  CHECK_THAT(bad.err, Catch::Contains("valgrind"));
}

TEST_CASE("attached: yes for a profiled process, no for an unprofiled one") {
  Scratch s;
  testing::make_dirs(s / "out");
  std::string start = launcher() + " exec --backend jemalloc --preload " + kJemalloc + " --output-dir " + quote(s / "out") +
                      " -- " + quote(fixture("leak")) + " leak 4 pidfile " + quote(s / "pid") + " sleep 20 &";
  RunResult r = testing::run(start + " while [ ! -s " + quote(s / "pid") + " ]; do sleep 0.05; done; " + launcher() +
                             " attached $(cat " + quote(s / "pid") + ") --json --window 0.2 --backend jemalloc --preload " +
                             kJemalloc + " --output-dir " + quote(s / "out") + "; rc=$?; kill %1; exit $rc");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  json j = json::parse(r.out);
  CHECK(j["attached"] == true);
  CHECK(j["mapped"] == true);
  CHECK(j["linkage"] == "dynamic");

  RunResult no = testing::run(quote(fixture("leak")) + " pidfile " + quote(s / "pid2") + " sleep 20 & while [ ! -s " +
                              quote(s / "pid2") + " ]; do sleep 0.05; done; " + launcher() + " attached $(cat " +
                              quote(s / "pid2") + ") --window 0.1 --backend jemalloc --output-dir " + quote(s / "out") +
                              "; rc=$?; kill %1; exit $rc");
  CHECK(no.exit_code == 1);
  CHECK_THAT(no.out, Catch::Contains("NOT ATTACHED"));
}

TEST_CASE("attached: with no flags or config, the backend and output dir come from the process itself") {
  Scratch s;
  testing::make_dirs(s / "out");
  std::string start = launcher() + " exec --backend jemalloc --preload " + kJemalloc + " --output-dir " + quote(s / "out") +
                      " -- " + quote(fixture("leak")) + " leak 4 pidfile " + quote(s / "pid") + " sleep 20 &";
  RunResult r = testing::run("unset MEMPROFILE_BACKEND MEMPROFILE_OUTPUT_DIR; " + start + " while [ ! -s " +
                             quote(s / "pid") + " ]; do sleep 0.05; done; " + launcher() + " attached $(cat " +
                             quote(s / "pid") + ") --json --window 0.2 --config " + quote(s / "no.conf") +
                             "; rc=$?; kill %1; exit $rc");
  INFO(r.err << r.out);
  CHECK(r.exit_code == 0);
  json j = json::parse(r.out);
  CHECK(j["attached"] == true);
  CHECK(j["backend"] == "jemalloc");  // not bytehound, the default
  CHECK_THAT(j["backend_from"].get<std::string>(), Catch::StartsWith("/proc/"));
  CHECK(j["output_dir"] == s / "out");
  CHECK_THAT(j["output_dir_from"].get<std::string>(), Catch::EndsWith("/environ"));
  // A flag still wins, and says so.
  RunResult f = testing::run(start + " while [ ! -s " + quote(s / "pid") + " ]; do sleep 0.05; done; " + launcher() +
                             " attached $(cat " + quote(s / "pid") + ") --json --window 0.1 --backend heaptrack --config " +
                             quote(s / "no.conf") + "; rc=$?; kill %1; exit $rc");
  json k = json::parse(f.out);
  CHECK(k["backend"] == "heaptrack");
  CHECK(k["backend_from"] == "--backend");
  CHECK(k["attached"] == false);
}

TEST_CASE("attached: a control socket that gives no answer is said, not left out") {
  // A socket file nothing listens on any more: connect is refused at once.
  // (In a short directory: a socket's path has room for 107 bytes.)
  std::string run = "d=$(mktemp -d /tmp/mp-attached.XXXXXX); sleep 20 & pid=$!; "
                    "python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "
                    "$d/memprofile-ctl.$pid.sock && " + launcher() +
                    " attached $pid --window 0 --backend jemalloc --output-dir $d";
  RunResult text = testing::run(run + "; rc=$?; kill %1; rm -rf $d; exit $rc");
  INFO(text.err);
  CHECK(text.exit_code == 1);  // nothing mapped: NOT ATTACHED
  CHECK_THAT(text.out, Catch::Contains("  recording: unknown (the control socket did not answer: "));
  RunResult j = testing::run(run + " --json; rc=$?; kill %1; rm -rf $d; exit $rc");
  json a = json::parse(j.out);
  CHECK(a["recording"].is_null());
  CHECK_FALSE(a["control_error"].get<std::string>().empty());
}

TEST_CASE("profile: jemalloc records a heap profile that names the leaking function") {
  Scratch s;
  testing::make_dirs(s / "out");
  RunResult r = testing::run(launcher() + " exec --backend jemalloc --preload " + kJemalloc + " --output-dir " +
                             quote(s / "out") + " -- " + quote(fixture("leak")) + " leak 64");
  REQUIRE(r.exit_code == 0);
  RunResult heaps = testing::run("ls " + quote(s / "out") + " | grep '^jeprof\\..*\\.heap$'");
  REQUIRE_FALSE(heaps.out.empty());
  std::string heap = s / "out/" + testing::lines(heaps.out).back();
  RunResult text = testing::run("jeprof --text " + quote(fixture("leak")) + " " + quote(heap));
  INFO(text.err);
  CHECK_THAT(text.out, Catch::Contains("leaky_function"));
}

TEST_CASE("profile: heaptrack records a trace that names the leaking function") {
  Scratch s;
  testing::make_dirs(s / "out");
  RunResult r = testing::run(launcher() + " exec --backend heaptrack --preload " + kHeaptrack + " --output-dir " +
                             quote(s / "out") + " -- " + quote(fixture("leak")) + " leak 8");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  RunResult raw = testing::run("ls " + quote(s / "out") + "/heaptrack.*.raw");
  REQUIRE_FALSE(raw.out.empty());
  RunResult printed = testing::run("/usr/lib/heaptrack/libexec/heaptrack_interpret < " + quote(testing::lines(raw.out)[0]) +
                                   " > " + quote(s / "trace") + " && heaptrack_print " + quote(s / "trace"));
  INFO(printed.err);
  CHECK_THAT(printed.out, Catch::Contains("leaky_function"));
}

TEST_CASE("arm64: the cross-built static launcher runs the arm64 app in an arm64 root under qemu") {
  Scratch s;
  std::string root = s / "root";
  REQUIRE(testing::run("cp -al " + quote(testing::rootfs("arm64")) + " " + quote(root) + " 2>/dev/null || cp -a " +
                       quote(testing::rootfs("arm64")) + " " + quote(root)).exit_code == 0);
  testing::copy_file(testing::launcher_arm64_bin(), root + "/memprofile");
  testing::copy_file(fixture("arm64-leak"), root + "/app");
  testing::copy_file(fixture("libprobe-arm64.so"), root + "/libprobe.so", 0644);
  testing::make_dirs(root + "/out");
  RunResult r = testing::run("PROBE_LOG=/out/probe.log chroot " + quote(root) +
                             " /memprofile exec --backend bytehound --preload /libprobe.so --output-dir /out -- /app pidfile /out/pid envfile /out/env exit 5");
  INFO(r.err);
  CHECK(r.exit_code == 5);
  std::string pid = testing::lines(testing::read_file(root + "/out/pid")).at(0);
  CHECK(testing::read_file(root + "/out/probe.log") == pid + " /app\n");
  CHECK_THAT(testing::read_file(root + "/out/env"), Catch::Contains("MEMORY_PROFILER_USE_SHADOW_STACK=0"));
}
