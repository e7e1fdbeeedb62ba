// One launcher model: exec's command line, its program search and its own
// finding codes, shared by `exec` and by `preflight` (an image whose
// entrypoint is the launcher). Each behaviour is checked in the model and
// then, where exec and preflight used to differ, in both of them.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "elf_builder.h"
#include "image/file_tree.h"
#include "image/image.h"
#include "support.h"
#include "verdict/findings.h"
#include "runtime/launcher.h"
#include "verdict/preflight.h"
#include "runtime/backend.h"
#include "runtime/exec_settings.h"

using namespace memprofile;
using nlohmann::json;
using testing::launcher;
using testing::quote;
using testing::RunResult;
using testing::Scratch;

namespace {


// A root that holds a stand-in memprofile binary (preflight recognises the
// launcher by its name and mode), with Entrypoint `entrypoint`.
LoadedImage image_of(const Scratch& s, std::vector<std::string> entrypoint, std::vector<std::string> env = {},
                     const std::string& workdir = "") {
  LoadedImage img;
  img.source = s.path();
  img.format = "rootfs";
  img.tree = std::make_shared<HostTree>(s.path());
  img.config.entrypoint = std::move(entrypoint);
  img.config.env = std::move(env);
  img.config.working_dir = workdir;
  return img;
}

const Finding* find(const PreflightResult& r, const std::string& code) {
  for (const auto& f : r.findings)
    if (f.code == code) return &f;
  return nullptr;
}

}  // namespace

TEST_CASE("launcher model: exec's options end at -- or at the program's first word") {
  ExecArgs a = parse_exec_args({"--backend", "jemalloc", "--output-dir=/p", "--min-free-mb", "16", "--strict", "--",
                                "/app", "--port", "8080"});
  CHECK(a.error.empty());
  CHECK(a.backend == "jemalloc");
  CHECK(a.output_dir == "/p");
  CHECK(a.min_free_mb == uint64_t{16});
  CHECK(a.strict);
  CHECK(a.command == std::vector<std::string>{"/app", "--port", "8080"});
  // Without "--": the program's own options are its own.
  ExecArgs b = parse_exec_args({"--from-config", "/app", "--strict"});
  CHECK(b.error.empty());
  CHECK(b.from_config);
  CHECK_FALSE(b.strict);
  CHECK(b.command == std::vector<std::string>{"/app", "--strict"});
  CHECK(parse_exec_args({"--from-config", "--"}).command.empty());
}

TEST_CASE("launcher model: a bad option is an error, and the command is still known") {
  ExecArgs unknown = parse_exec_args({"--colour", "--", "/app"});
  CHECK_THAT(unknown.error, Catch::Contains("unknown option --colour"));
  CHECK(unknown.command == std::vector<std::string>{"/app"});
  CHECK_THAT(parse_exec_args({"--min-free-mb", "lots", "/app"}).error, Catch::Contains("--min-free-mb lots"));
  CHECK_THAT(parse_exec_args({"--log-format", "xml", "/app"}).error, Catch::Contains("--log-format xml"));
  CHECK_THAT(parse_exec_args({"--backend"}).error, Catch::Contains("--backend needs a value"));
  CHECK_THAT(parse_exec_args({"--strict=yes", "/app"}).error, Catch::Contains("takes no value"));
  ExecArgs help = parse_exec_args({"--help"});
  CHECK(help.help);
  CHECK_FALSE(help.error.empty());  // as an entrypoint, the program would never start
}

TEST_CASE("launcher model: memprofile's own -v goes before exec") {
  CHECK(exec_subcommand_index({"memprofile", "exec", "--", "/app"}) == 1);
  CHECK(exec_subcommand_index({"memprofile", "-v", "exec"}) == 2);
  CHECK(exec_subcommand_index({"/usr/bin/memprofile", "--verbose", "-vv", "exec"}) == 3);
  CHECK(exec_subcommand_index({"memprofile", "check", "exec"}) == 0);
  CHECK(exec_subcommand_index({"memprofile", "--version", "exec"}) == 0);
  CHECK(exec_subcommand_index({"memprofile"}) == 0);
}

TEST_CASE("launcher model: config file < MEMPROFILE_* variables < flags") {
  std::string conf = "backend = heaptrack\noutput_dir = /conf\ntarget = /conf-target\nentrypoint = [\"/app\"]\n"
                     "cmd = [\"--serve\"]\n";
  auto env = [](const char* name) { return std::string(name) == "MEMPROFILE_OUTPUT_DIR" ? "/env" : ""; };
  LaunchPlan p = plan_launch(parse_exec_args({"--from-config", "--target", "/flag-target"}), conf, "exec.conf", env);
  CHECK(p.error.empty());
  CHECK(p.backend == Backend::Heaptrack);
  CHECK(p.preload == default_preload(Backend::Heaptrack));
  CHECK(p.cfg.output_dir == "/env");
  CHECK(p.cfg.target == "/flag-target");
  CHECK(p.argv == std::vector<std::string>{"/app", "--serve"});
  // A bad flag comes first; a bad config is kept apart too (--from-config
  // cannot start anything without it).
  LaunchPlan bad = plan_launch(parse_exec_args({"--colour", "--from-config"}), std::string("colour = blue\n"), "exec.conf",
                               env);
  CHECK_THAT(bad.error, Catch::Contains("--colour"));
  CHECK_THAT(bad.config_error, Catch::Contains("unknown key 'colour'"));
  LaunchPlan backend = plan_launch(parse_exec_args({"--backend", "valgrind", "/app"}), std::nullopt, "exec.conf", env);
  CHECK_THAT(backend.error, Catch::Contains("valgrind"));
  CHECK(backend.backend == Backend::Bytehound);
}

TEST_CASE("launcher model: dormant mode and the disk budget, from flags, variables or the config") {
  ExecArgs a = parse_exec_args({"--dormant", "--max-profile-mb=64", "--", "/app"});
  CHECK(a.error.empty());
  CHECK(a.dormant);
  CHECK(a.max_profile_mb == uint64_t{64});
  CHECK_THAT(parse_exec_args({"--max-profile-mb", "-1", "/app"}).error, Catch::Contains("--max-profile-mb -1"));
  CHECK_THAT(parse_exec_args({"--dormant=yes", "/app"}).error, Catch::Contains("takes no value"));
  auto none = [](const char*) { return std::string(); };
  LaunchPlan from_flags = plan_launch(a, std::nullopt, "exec.conf", none);
  CHECK(from_flags.cfg.dormant);
  CHECK(from_flags.cfg.max_profile_mb == 64);
  LaunchPlan from_conf = plan_launch(parse_exec_args({"/app"}), std::string("dormant = 1\nmax_profile_mb = 32\n"),
                                     "exec.conf", none);
  CHECK(from_conf.cfg.dormant);
  CHECK(from_conf.cfg.max_profile_mb == 32);
  auto env = [](const char* name) {
    std::string n = name;
    return n == "MEMPROFILE_DORMANT" ? "1" : n == "MEMPROFILE_MAX_PROFILE_MB" ? "16" : "";
  };
  LaunchPlan from_env = plan_launch(parse_exec_args({"/app"}), std::nullopt, "exec.conf", env);
  CHECK(from_env.cfg.dormant);
  CHECK(from_env.cfg.max_profile_mb == 16);
  CHECK_THAT(plan_launch(parse_exec_args({"/app"}), std::string("max_profile_mb = lots\n"), "exec.conf", none).error,
             Catch::Contains("max_profile_mb is not a number"));
}

TEST_CASE("launcher model: --serve and its token from flags, variables or the config") {
  auto none = [](const char*) { return std::string(); };
  LaunchPlan from_flags = plan_launch(parse_exec_args({"--serve", "127.0.0.1:6060", "--serve-token-file=/t", "/app"}),
                                      std::nullopt, "exec.conf", none);
  CHECK(from_flags.error.empty());
  CHECK(from_flags.cfg.serve == "127.0.0.1:6060");
  CHECK(from_flags.cfg.serve_token_file == "/t");
  auto env = [](const char* name) {
    std::string n = name;
    return n == "MEMPROFILE_SERVE" ? "0.0.0.0:7070" : n == "MEMPROFILE_SERVE_TOKEN_FILE" ? "/run/token" : "";
  };
  LaunchPlan from_env = plan_launch(parse_exec_args({"/app"}), std::string("serve = 127.0.0.1:1\n"), "exec.conf", env);
  CHECK(from_env.cfg.serve == "0.0.0.0:7070");
  CHECK(from_env.cfg.serve_token_file == "/run/token");
  LaunchPlan from_conf = plan_launch(parse_exec_args({"/app"}), std::string("serve = 127.0.0.1:1\n"), "exec.conf", none);
  CHECK(from_conf.cfg.serve == "127.0.0.1:1");
  CHECK_THAT(parse_exec_args({"--serve"}).error, Catch::Contains("--serve needs a value"));
}

TEST_CASE("launcher model: heaptrack cannot start dormant, and says so in one line") {
  auto none = [](const char*) { return std::string(); };
  LaunchPlan p = plan_launch(parse_exec_args({"--dormant", "--backend", "heaptrack", "/app"}), std::nullopt, "exec.conf",
                             none);
  CHECK_THAT(p.error, Catch::Contains("heaptrack cannot start dormant"));
  CHECK(p.error.find('\n') == std::string::npos);
  CHECK(plan_launch(parse_exec_args({"--dormant", "--backend", "jemalloc", "/app"}), std::nullopt, "exec.conf", none)
            .error.empty());
}

TEST_CASE("launcher model: a value the backend's own settings format cannot hold is refused in one line") {
  auto none = [](const char*) { return std::string(); };
  auto error = [&](std::vector<std::string> args) { return plan_launch(parse_exec_args(args), std::nullopt, "exec.conf", none).error; };
  // jemalloc splits MALLOC_CONF at ',' (and ':'): the rest of the name would
  // turn dormant recording on and send dumps outside the directory.
  CHECK_THAT(error({"--dormant", "--backend", "jemalloc", "--output-dir", "/w/o,prof_active:true,x", "/app"}),
             Catch::Contains("jemalloc's MALLOC_CONF"));
  CHECK_THAT(error({"--backend", "jemalloc", "--output-dir", "/w/a:b", "/app"}), Catch::Contains("','"));
  CHECK_THAT(error({"--backend", "bytehound", "--output-dir", "/w/%p", "/app"}), Catch::Contains("bytehound expands"));
  CHECK_THAT(error({"--backend", "heaptrack", "--output-dir", "/w/$$", "/app"}), Catch::Contains("heaptrack replaces"));
  CHECK_THAT(error({"--backend", "jemalloc", "--preload", "/lib/a b.so", "/app"}), Catch::Contains("LD_PRELOAD"));
  CHECK_THAT(error({"--backend", "none", "--output-dir", "/w", "/app"}), Catch::Equals(""));
  // What one backend's format holds is fine for another's.
  CHECK(error({"--backend", "bytehound", "--output-dir", "/w/o,x", "/app"}).empty());
  CHECK(error({"--backend", "memray", "--output-dir", "/w/o,%p:$$", "/app"}).empty());
  for (auto b : {"jemalloc", "bytehound", "heaptrack", "none", "memray"})
    CHECK(error({"--backend", b, "--output-dir", "/var/memprofile", "/app"}).empty());
  CHECK(error({"--backend", "jemalloc", "--output-dir", "/w/o,x", "/app"}).find('\n') == std::string::npos);
}

TEST_CASE("backend settings: dormant jemalloc and bytehound load with recording off") {
  auto value = [](const std::vector<std::pair<std::string, std::string>>& env, const std::string& key) {
    for (const auto& [k, v] : env)
      if (k == key) return v;
    return std::string();
  };
  CHECK_THAT(value(backend_env(Backend::Jemalloc, "/p", false, false, true), "MALLOC_CONF"),
             Catch::Contains("prof:true,prof_active:false"));
  CHECK_THAT(value(backend_env(Backend::Jemalloc, "/p", false, false, false), "MALLOC_CONF"),
             Catch::Contains("prof:true,prof_active:true"));
  CHECK(value(backend_env(Backend::Bytehound, "/p", false, false, true), "MEMORY_PROFILER_DISABLE_BY_DEFAULT") == "1");
  CHECK(value(backend_env(Backend::Bytehound, "/p", false, false, false), "MEMORY_PROFILER_DISABLE_BY_DEFAULT").empty());
  CHECK_FALSE(dormant_unsupported(Backend::Heaptrack).empty());
  CHECK(dormant_unsupported(Backend::Jemalloc).empty());
}

TEST_CASE("exec settings: one table read alike by the flags, the environment and the config file") {
  auto none = [](const char*) { return std::string(); };
  // The dump interval, from each source, into MALLOC_CONF's lg_prof_interval.
  auto conf = [](uint64_t mb) {
    for (const auto& [k, v] : backend_env(Backend::Jemalloc, "/p", false, false, false, mb))
      if (k == "MALLOC_CONF") return v;
    return std::string();
  };
  CHECK(plan_launch(parse_exec_args({"/app"}), std::nullopt, "exec.conf", none).cfg.dump_every_mb == 1024);
  CHECK_THAT(conf(1024), Catch::Contains(",lg_prof_interval:30,"));
  CHECK_THAT(conf(1), Catch::Contains(",lg_prof_interval:20,"));
  CHECK_THAT(conf(4096), Catch::Contains(",lg_prof_interval:32,"));
  CHECK_THAT(conf(0), Catch::Contains(",lg_prof_interval:-1,"));
  CHECK(plan_launch(parse_exec_args({"--dump-every-mb=256", "/app"}), std::string("dump_every_mb = 64\n"), "exec.conf",
                    none)
            .cfg.dump_every_mb == 256);
  auto env = [](const char* name) { return std::string(name) == "MEMPROFILE_DUMP_EVERY_MB" ? "0" : ""; };
  LaunchPlan from_env = plan_launch(parse_exec_args({"/app"}), std::string("dump_every_mb = 64\n"), "exec.conf", env);
  CHECK(from_env.error.empty());
  CHECK(from_env.cfg.dump_every_mb == 0);
  CHECK(plan_launch(parse_exec_args({"/app"}), std::string("dump_every_mb = 64 \r\n"), "exec.conf", none)
            .cfg.dump_every_mb == 64);
  // jemalloc's interval is 2^N bytes: anything else is refused, each in the
  // words of where it came from.
  CHECK_THAT(parse_exec_args({"--dump-every-mb", "1000", "/app"}).error,
             Catch::Contains("--dump-every-mb 1000 is not 0 or a power of two"));
  CHECK_THAT(parse_exec_args({"--dump-every-mb", "2097152", "/app"}).error, Catch::Contains("power of two"));
  CHECK_THAT(plan_launch(parse_exec_args({"/app"}), std::string("dump_every_mb = 3\n"), "exec.conf", none).error,
             Catch::Contains("exec.conf: line 1: dump_every_mb is not 0 or a power of two"));
  auto bad_env = [](const char* name) { return std::string(name) == "MEMPROFILE_DUMP_EVERY_MB" ? "1.5" : ""; };
  CHECK_THAT(plan_launch(parse_exec_args({"/app"}), std::nullopt, "exec.conf", bad_env).error,
             Catch::Contains("MEMPROFILE_DUMP_EVERY_MB is not a number of MiB: '1.5'"));
  // A number the file once took with trailing words is refused now, as the
  // flag and the variable refuse it.
  CHECK_THAT(plan_launch(parse_exec_args({"/app"}), std::string("min_free_mb = 12abc\n"), "exec.conf", none).error,
             Catch::Contains("min_free_mb is not a number of MiB"));
  CHECK(plan_launch(parse_exec_args({"/app"}), std::string("min_free_mb = 64  # the floor\n"), "exec.conf", none)
            .cfg.min_free_mb == 64);
  // An empty --backend is the default, as before.
  LaunchPlan empty_backend = plan_launch(parse_exec_args({"--backend", "", "/app"}), std::nullopt, "exec.conf", none);
  CHECK(empty_backend.error.empty());
  CHECK(empty_backend.backend == kDefaultBackend);
  // A switch means the same from each source. MEMPROFILE_STRICT holds even
  // where another setting is bad, and only adds to the file's strict.
  auto strict_env = [](const char* name) {
    std::string n = name;
    return n == "MEMPROFILE_STRICT" ? "true" : n == "MEMPROFILE_DUMP_EVERY_MB" ? "1000" : "";
  };
  LaunchPlan strict_bad = plan_launch(parse_exec_args({"/app"}), std::nullopt, "exec.conf", strict_env);
  CHECK(strict_bad.strict);
  CHECK_FALSE(strict_bad.error.empty());
  auto strict_off = [](const char* name) { return std::string(name) == "MEMPROFILE_STRICT" ? "0" : ""; };
  CHECK(plan_launch(parse_exec_args({"/app"}), std::string("strict = 1\n"), "exec.conf", strict_off).strict);
  CHECK(plan_launch(parse_exec_args({"/app"}), std::string("strict = 1\n"), "exec.conf", none).strict);
  CHECK(plan_launch(parse_exec_args({"--strict", "/app"}), std::nullopt, "exec.conf", none).strict);
  // Every row is documented where users read the settings, under each name
  // it has.
  std::ifstream doc(testing::source_dir() + "/docs/launcher.md");
  std::string text((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
  REQUIRE_FALSE(text.empty());
  for (const auto& s : exec_settings())
    for (const char* name : {s.flag, s.key, s.env})
      if (name) CHECK_THAT(text, Catch::Contains(std::string("`") + name + "`"));
}

TEST_CASE("lookup_program: execvp's search inside a tree") {
  Scratch s;
  testing::write_file(s / "bin/app", "#!/bin/sh\n", 0755);
  testing::write_file(s / "data/app", "not executable", 0644);
  testing::write_file(s / "work/app", "#!/bin/sh\n", 0755);
  HostTree tree(s.path());
  auto bin = lookup_program(tree, "app", "/data:/bin", "/");
  REQUIRE(bin);
  CHECK(bin->path == "/bin/app");  // /data/app is passed over: not executable
  CHECK(bin->executable());
  // An empty PATH entry is the working directory, as for execvp.
  auto here = lookup_program(tree, "app", "/nothing::/bin", "/work");
  REQUIRE(here);
  CHECK(here->file.path == "/work/app");
  // A name with '/' is a path, taken as it is, executable or not.
  auto data = lookup_program(tree, "../data/app", "/bin", "/work");
  REQUIRE(data);
  CHECK(data->path == "../data/app");
  CHECK(data->file.path == "/data/app");
  CHECK_FALSE(data->executable());
  CHECK_FALSE(lookup_program(tree, "nope", "/bin:/data", "/"));
  CHECK_FALSE(lookup_program(tree, "/bin/nope", "/bin", "/"));
}

TEST_CASE("exec and preflight: an empty PATH entry finds the program in the working directory") {
  Scratch s;
  testing::write_file(s / "work/app", testing::ElfBuilder().build(), 0755);
  // preflight: the program is found, not ENTRYPOINT_MISSING.
  PreflightResult r = preflight(image_of(s, {"app"}, {"PATH=/nothing:"}, "/work"), {});
  CHECK(r.program == "/work/app");
  CHECK_FALSE(find(r, "ENTRYPOINT_MISSING"));
  // exec: the same search over the live root starts ./app.
  testing::write_file(s / "run/app", "#!/bin/sh\necho started\n", 0755);
  RunResult e = testing::run("cd " + quote(s / "run") + " && PATH=/nothing: " + launcher() + " exec --output-dir " +
                             quote(s / "out") + " -- app");
  INFO(e.err);
  CHECK(e.exit_code == 0);
  CHECK(e.out == "started\n");
}

TEST_CASE("exec and preflight: the same command line, read alike") {
  Scratch s;
  testing::write_file(s / "usr/bin/memprofile", "stand-in", 0755);
  const std::vector<std::string> words = {"--colour", "--output-dir", s / "out", "--", "/bin/echo", "hi", "--strict"};
  std::vector<std::string> entrypoint = {"/usr/bin/memprofile", "exec"};
  entrypoint.insert(entrypoint.end(), words.begin(), words.end());
  ExecArgs model = parse_exec_args(words);
  REQUIRE_FALSE(model.error.empty());

  // preflight: the launcher's command and its LAUNCHER_CONFIG, in the model's words.
  PreflightResult r = preflight(image_of(s, entrypoint), {});
  CHECK(r.argv == std::vector<std::string>{"/bin/echo", "hi", "--strict"});
  REQUIRE(r.launcher);
  CHECK(r.launcher->output_dir == s / "out");
  const Finding* f = find(r, "LAUNCHER_CONFIG");
  REQUIRE(f);
  CHECK(f->message == model.error);

  // exec: the same words; the same message, and the program runs unprofiled
  // with its own --strict.
  std::string line;
  for (const auto& w : words) line += " " + quote(w);
  RunResult e = testing::run(launcher() + " exec" + line);
  INFO(e.err);
  CHECK(e.exit_code == 0);
  CHECK(e.out == "hi --strict\n");
  CHECK_THAT(e.err, Catch::Contains("LAUNCHER_CONFIG: " + model.error));
  // exec's own --strict, before the program, refuses.
  RunResult strict = testing::run(launcher() + " exec --strict" + line);
  CHECK(strict.exit_code == 3);
  CHECK(strict.out.empty());

  // The global -v before exec: both see the launcher.
  entrypoint.insert(entrypoint.begin() + 1, "-v");
  PreflightResult v = preflight(image_of(s, entrypoint), {});
  CHECK(v.launcher);
  CHECK(v.argv == r.argv);
  RunResult ev = testing::run(launcher() + " -v exec" + line);
  CHECK(ev.exit_code == 0);
  CHECK(ev.out == "hi --strict\n");
}

TEST_CASE("fix order: the catalogue is its one source") {
  std::vector<Finding> f = {
      make_finding("OUTPUT_DIR_MISSING", "m"), make_finding("GO_BINARY", "g"), make_finding("PRELOAD_NOT_LOADED", "l"),
      make_finding("STATIC_BINARY", "s"),      make_finding("NO_PRELOAD", "n"), make_finding("NO_ENTRYPOINT", "e"),
      make_finding("PLATFORM_MISMATCH", "p"),
  };
  sort_by_fix_order(f);
  std::vector<std::string> codes;
  for (const auto& x : f) codes.push_back(x.code);
  // Errors by fix order, the unordered one last; then warnings and infos as found.
  CHECK(codes == std::vector<std::string>{"NO_ENTRYPOINT", "STATIC_BINARY", "OUTPUT_DIR_MISSING", "PRELOAD_NOT_LOADED",
                                          "GO_BINARY", "PLATFORM_MISMATCH", "NO_PRELOAD"});
  std::set<int> orders;
  for (const auto& spec : finding_catalog()) {
    if (spec.fix_order == kNoFixOrder) continue;
    INFO(spec.code);
    CHECK(spec.severity == Severity::Error);
    CHECK(orders.insert(spec.fix_order).second);
  }
}

TEST_CASE("exec's own finding codes are in the catalogue and documented") {
  std::string doc = testing::read_file(testing::source_dir() + "/docs/findings.md");
  for (const char* code : {"OUTPUT_DIR_FULL", "ENV_TOO_LARGE", "TARGET_NOT_FOUND", "ENTRYPOINT_NOT_EXECUTABLE",
                           "LAUNCHER_CONFIG", "OUTPUT_DIR_MISSING", "OUTPUT_DIR_NOT_WRITABLE", "CTL_LIBRARY_MISSING"}) {
    INFO(code);
    CHECK(make_finding(code, "x").severity == Severity::Error);
    CHECK_THAT(doc, Catch::Contains(std::string("## `") + code + "`"));
  }
  // What the running launcher says names a catalogued, documented code.
  Scratch s;
  testing::make_dirs(s / "out");
  RunResult r = testing::run(launcher() + " exec --log-format json --min-free-mb 999999999999 --output-dir " +
                             quote(s / "out") + " --preload " + quote(s / "none.so") + " -- /bin/true");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  auto lines = testing::lines(r.err);
  REQUIRE(lines.size() == 1);
  json j = json::parse(lines[0]);
  std::string code = j["code"];
  CHECK(std::any_of(finding_catalog().begin(), finding_catalog().end(),
                    [&](const FindingSpec& spec) { return code == spec.code; }));
  CHECK_THAT(doc, Catch::Contains("## `" + code + "`"));
  CHECK_THAT(j["msg"].get<std::string>(), Catch::Contains("also: OUTPUT_DIR_FULL"));
}

TEST_CASE("exit codes keep their documented numbers") {
  CHECK(to_int(ExitCode::Ok) == 0);
  CHECK(to_int(ExitCode::NotProfilable) == 1);
  CHECK(to_int(ExitCode::InputError) == 2);
  CHECK(to_int(ExitCode::Refused) == 3);
  CHECK(to_int(ExitCode::CannotExecute) == 126);
  CHECK(to_int(ExitCode::NotFound) == 127);
  // exec: no program, a program that is not there, one that cannot run.
  Scratch s;
  testing::write_file(s / "not-executable", "data", 0644);
  CHECK(testing::run(launcher() + " exec --").exit_code == 2);
  CHECK(testing::run(launcher() + " exec -- " + quote(s / "nope")).exit_code == 127);
  CHECK(testing::run("PATH=" + quote(s.path()) + " " + launcher() + " exec -- nope").exit_code == 127);
  CHECK(testing::run(launcher() + " exec --output-dir " + quote(s.path()) + " -- " + quote(s / "not-executable")).exit_code ==
        126);
}

// What exec and preflight ask of the bootstrap is every file the build
// installs beside the control library: a module added to ctl/python/ and
// not to the list would leave an incomplete bootstrap READY.
TEST_CASE("memray's bootstrap: the files exec and preflight require are ctl/python's") {
  const std::string root = testing::source_dir() + "/ctl/python";
  std::set<std::string> on_disk;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root))
    if (e.is_regular_file() && e.path().extension() == ".py")
      on_disk.insert(std::filesystem::relative(e.path(), root).string());
  const std::set<std::string> required(kMemrayBootstrapFiles.begin(), kMemrayBootstrapFiles.end());
  CHECK(on_disk.size() >= 2);
  CHECK(required == on_disk);
}
