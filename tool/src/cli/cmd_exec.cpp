// `memprofile exec [options] -- PROGRAM [ARGS...]`: the image's entrypoint.
// Checks that the profiler can attach and record, then becomes PROGRAM with
// execve (no wrapper stays: PID 1 is the application, signals and exit code
// are its own). LD_PRELOAD and the backend's settings go into PROGRAM's
// environment only, never the image's, so `kubectl exec`/`kubectl cp`
// processes are not injected. A failed check never takes the service down
// unless --strict: the program runs unprofiled with one ERROR line.
#include <errno.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "verdict/checker.h"
#include "cli/cmd_launcher.h"
#include "base/error.h"
#include "image/file_tree.h"
#include "verdict/profiler.h"

extern char** environ;

namespace memprofile {

using nlohmann::json;

namespace {

struct ExecOptions {
  std::vector<std::string> command;
  std::string config = kDefaultConfigPath;
  std::string backend, preload, output_dir, target;
  int64_t min_free_mb = -1;
  bool strict = false;
  bool from_config = false;
  std::string log_format = "text";
};

struct Problem {
  std::string code, what, fix;
};

// execvp's search, returning the path it would exec.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = getenv("PATH");
  std::string p = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find(':', i);
    if (j == std::string::npos) j = p.size();
    std::string dir = j > i ? p.substr(i, j - i) : ".";
    std::string cand = dir + "/" + name;
    struct stat st;
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0) return cand;
    i = j + 1;
  }
  return "";
}

std::string absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[4096];
  return std::string(getcwd(cwd, sizeof cwd) ? cwd : "/") + "/" + p;
}

// execve; returns its errno only when it fails.
int try_exec(const std::string& path, const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> a, e;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
  e.push_back(nullptr);
  execve(path.c_str(), a.data(), e.data());
  return errno;
}

[[noreturn]] void exec_failed(const std::string& path, int err) {
  std::cerr << "memprofile: cannot exec " << path << ": " << std::strerror(err) << "\n";
  _exit(err == ENOENT ? 127 : 126);
}

[[noreturn]] void become(const std::string& path, const std::vector<std::string>& argv,
                         const std::vector<std::string>& env) {
  exec_failed(path, try_exec(path, argv, env));
}

std::vector<std::string> current_env() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  return env;
}

bool env_has(const std::vector<std::string>& env, const std::string& key) {
  for (const auto& e : env)
    if (e.compare(0, key.size() + 1, key + "=") == 0) return true;
  return false;
}

std::vector<Problem> check_everything(const std::string& target, const std::string& preload, const std::string& out_dir,
                                      uint64_t min_free_mb, bool* aarch64) {
  std::vector<Problem> problems;
  HostTree root("/");
  CheckerOptions co;
  co.use_root = true;
  co.preload = absolute(preload);
  if (const char* llp = getenv("LD_LIBRARY_PATH")) co.ld_library_path = llp;
  Checker checker(root, co);
  auto r = resolve(root, absolute(target));
  if (!r || r->node.kind != FsNode::Kind::Regular) {
    problems.push_back({"TARGET_NOT_FOUND", target + " does not exist", "give --target as the real program's path"});
    return problems;
  }
  std::shared_ptr<const ElfInfo> elf;
  try {
    elf = root.elf(r->path);
  } catch (const Error& e) {
    problems.push_back({"ENTRYPOINT_NOT_EXECUTABLE", e.what(), "point memprofile exec at an ELF program"});
    return problems;
  }
  if (!elf) {
    problems.push_back({"ENTRYPOINT_NOT_EXECUTABLE", target + " is not an ELF program (a script?)",
                        "give the program the script runs with --target, or exec it directly"});
    return problems;
  }
  *aarch64 = elf->machine == 183;  // EM_AARCH64
  FileReport rep = checker.check(r->path, elf);
  for (const auto& f : rep.findings)
    if (f.severity == Severity::Error) problems.push_back({f.code, f.message, f.fix});

  struct stat st;
  if (stat(out_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    problems.push_back({"OUTPUT_DIR_MISSING", "output directory " + out_dir + " does not exist",
                        "mount a volume (emptyDir with a sizeLimit) at " + out_dir + " or pass --output-dir"});
  } else if (access(out_dir.c_str(), W_OK | X_OK) != 0) {
    problems.push_back({"OUTPUT_DIR_NOT_WRITABLE", "output directory " + out_dir + " is not writable by uid " +
                                                       std::to_string(getuid()),
                        "mount a writable volume there or chown it to the container's user"});
  } else {
    struct statvfs vfs;
    if (statvfs(out_dir.c_str(), &vfs) == 0) {
      uint64_t free_mb = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize / (1024 * 1024);
      if (free_mb < min_free_mb)
        problems.push_back({"OUTPUT_DIR_FULL", "only " + std::to_string(free_mb) + " MiB free on the filesystem of " +
                                                   out_dir + " (floor " + std::to_string(min_free_mb) + " MiB)",
                            "give the profile its own volume (not the application's data volume) with room to grow"});
    }
  }
  return problems;
}

int run_exec(const ExecOptions& o) {
  LauncherConfig cfg;
  std::string config_error;
  try {
    load_launcher_config(o.config, cfg);
    apply_env_overrides(cfg);
  } catch (const Error& e) {
    config_error = e.what();
  }
  if (!o.backend.empty()) cfg.backend = o.backend;
  if (!o.preload.empty()) cfg.preload = o.preload;
  if (!o.output_dir.empty()) cfg.output_dir = o.output_dir;
  if (!o.target.empty()) cfg.target = o.target;
  if (o.min_free_mb >= 0) cfg.min_free_mb = static_cast<uint64_t>(o.min_free_mb);
  const char* strict_env = getenv("MEMPROFILE_STRICT");
  bool strict = o.strict || cfg.strict || (strict_env && std::string(strict_env) == "1");
  Logger log(o.log_format);

  std::vector<std::string> argv = o.command;
  if (o.from_config) {
    if (!config_error.empty()) {
      log.error("launcher_config", config_error, {{"code", "LAUNCHER_CONFIG"}});
      return kExitRefused;
    }
    argv = config_command(cfg, o.command);
  }
  if (argv.empty() || argv[0].empty()) {
    log.error("no_command",
              o.from_config ? o.config + " has no entrypoint or cmd to run" : "no PROGRAM given (exec [options] -- PROGRAM [ARGS...])",
              {{"code", "LAUNCHER_CONFIG"}});
    return 2;
  }
  std::string program = find_program(argv[0]);
  if (program.empty()) {
    log.error("program_not_found", argv[0] + " is not found on PATH", {{"program", argv[0]}});
    return 127;
  }
  std::vector<std::string> env = current_env();
  const char* disable = getenv("MEMPROFILE_DISABLE");
  if (disable && std::string(disable) == "1") {
    log.info("disabled", "MEMPROFILE_DISABLE=1: running " + program + " unprofiled", {{"program", program}});
    become(program, argv, env);
  }

  std::vector<Problem> problems;
  Backend backend = Backend::Bytehound;
  std::string preload, target = cfg.target.empty() ? program : cfg.target;
  bool aarch64 = false;
  try {
    if (!config_error.empty()) throw Error(config_error);
    backend = parse_backend(cfg.backend);
    preload = cfg.preload.empty() ? default_preload(backend) : cfg.preload;
    problems = check_everything(target, preload, cfg.output_dir, cfg.min_free_mb, &aarch64);
  } catch (const Error& e) {
    problems.push_back({"LAUNCHER_CONFIG", e.what(), "fix the flags or " + o.config});
  }
  if (!problems.empty()) {
    const Problem& p = problems.front();
    std::string more;
    for (size_t i = 1; i < problems.size(); ++i) more += (more.empty() ? "" : ", ") + problems[i].code;
    log.error("not_profiling",
              std::string(strict ? "refusing to start " : "running unprofiled: ") + program + ": " + p.code + ": " +
                  p.what + "; fix: " + p.fix + (more.empty() ? "" : " (also: " + more + ")"),
              {{"program", program}, {"target", target}, {"code", p.code}, {"fix", p.fix}, {"strict", strict}});
    if (strict) return kExitRefused;
    become(program, argv, env);
  }

  // The user's own settings win over memprofile's defaults.
  const std::vector<std::string> unprofiled_env = env;
  bool dispatcher = target != program;
  std::vector<std::string> added;
  for (const auto& [k, v] : backend_env(backend, cfg.output_dir, dispatcher, aarch64)) {
    if (env_has(env, k)) continue;
    env.push_back(k + "=" + v);
    added.push_back(k);
  }
  std::string lib = absolute(preload);
  if (env_has(env, "LD_PRELOAD")) {
    log.warn("ld_preload_set", "LD_PRELOAD is already set in the environment; leaving it as it is", {});
  } else {
    env.push_back("LD_PRELOAD=" + lib);
  }
  json settings = json::array();
  for (const auto& k : added) settings.push_back(k);
  log.info("start",
           "profiling " + target + " with " + to_string(backend) + " (" + lib + "), output in " + cfg.output_dir,
           {{"backend", to_string(backend)},
            {"library", lib},
            {"program", program},
            {"target", target},
            {"output_dir", cfg.output_dir},
            {"settings", settings}});
  int err = try_exec(program, argv, env);
  if (err != E2BIG) exec_failed(program, err);
  // The kernel bounds argv and the environment together (a quarter of the
  // stack limit, at most 6 MiB): one that only just fits without our
  // variables would keep the application from starting with them. Profiling
  // must never take the service down, so it runs as it would have without us.
  size_t extra = 0;
  for (size_t i = unprofiled_env.size(); i < env.size(); ++i) extra += env[i].size() + 1 + sizeof(char*);
  std::string why = "ENV_TOO_LARGE: the environment and arguments are too large for the kernel (E2BIG) once the "
                    "profiler's " + std::to_string(extra) + " bytes of settings are added";
  std::string fix = "make the environment or the arguments smaller";
  log.error("not_profiling", std::string(strict ? "refusing to start " : "running unprofiled: ") + program + ": " + why +
                                 "; fix: " + fix,
            {{"program", program}, {"target", target}, {"code", "ENV_TOO_LARGE"}, {"fix", fix}, {"strict", strict}});
  if (strict) return kExitRefused;
  become(program, argv, unprofiled_env);
}

}  // namespace

void setup_exec(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ExecOptions>();
  CLI::App* cmd = app.add_subcommand(
      "exec", "Check that the profiler will attach and record, then become PROGRAM with LD_PRELOAD set for it alone");
  cmd->add_option("--config", o->config, "launcher config file")->capture_default_str();
  cmd->add_option("--backend", o->backend, "bytehound, jemalloc or heaptrack (default: config, else bytehound)");
  cmd->add_option("--preload", o->preload, "the preload library (default: the backend's path in memprofile images)");
  cmd->add_option("--output-dir", o->output_dir, "where profiles go (default: config, else /var/memprofile)");
  cmd->add_option("--target", o->target, "the real program, when PROGRAM is a dispatcher that execs it");
  cmd->add_option("--min-free-mb", o->min_free_mb, "free space the output filesystem must have (default 256)");
  cmd->add_flag("--strict", o->strict, "exit 3 instead of running unprofiled when a check fails (or MEMPROFILE_STRICT=1)");
  cmd->add_option("--log-format", o->log_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_flag("--from-config", o->from_config,
                "run the config's entrypoint with ARGS, or with its cmd when none are given (images/ set this)");
  cmd->add_option("command", o->command, "-- PROGRAM [ARGS...]");
  cmd->callback([o, &exit_code] { exit_code = run_exec(*o); });
}

}  // namespace memprofile
