// `memprofile exec [options] -- PROGRAM [ARGS...]`: the image's entrypoint.
// Checks that the profiler can attach and record, then becomes PROGRAM with
// execve (no wrapper stays: PID 1 is the application, signals and exit code
// are its own). LD_PRELOAD and the backend's settings go into PROGRAM's
// environment only, never the image's, so `kubectl exec`/`kubectl cp`
// processes are not injected. A failed check never takes the service down
// unless --strict: the program runs unprofiled with one ERROR line.
#include <errno.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/logger.h"
#include "image/file_tree.h"
#include "verdict/checker.h"
#include "runtime/launcher.h"
#include "runtime/backend.h"

extern char** environ;

namespace memprofile {

using nlohmann::json;

namespace {

std::string current_dir() {
  char cwd[4096];
  return getcwd(cwd, sizeof cwd) ? cwd : "/";
}

std::string absolute(const std::string& p, const std::string& cwd) {
  if (!p.empty() && p[0] == '/') return p;
  return cwd + "/" + p;
}

// The launcher's environment, as EnvLookup reads it.
std::string process_env(const char* name) {
  const char* v = getenv(name);
  return v ? v : "";
}

// The config file's text; nullopt when there is none (defaults and flags).
std::optional<std::string> read_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
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
  _exit(to_int(err == ENOENT ? ExitCode::NotFound : ExitCode::CannotExecute));
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

// What keeps the profiler from attaching to the target or from recording:
// the check engine against the live root, then the output directory as
// the running user sees it. Error findings only, in the order found.
std::vector<Finding> check_everything(const HostTree& root, const std::string& target,
                                      const std::optional<FoundProgram>& found, const std::string& preload,
                                      const std::string& cwd, const std::string& out_dir, uint64_t min_free_mb,
                                      uint16_t* machine) {
  std::vector<Finding> problems;
  if (!found || found->file.node.kind != FsNode::Kind::Regular) {
    problems.push_back(make_finding("TARGET_NOT_FOUND", target + " does not exist", "give --target as the real program's path"));
    return problems;
  }
  const std::string& path = found->file.path;
  std::shared_ptr<const ElfInfo> elf;
  try {
    elf = root.elf(path);
  } catch (const Error& e) {
    problems.push_back(make_finding("ENTRYPOINT_NOT_EXECUTABLE", e.what(), "point memprofile exec at an ELF program"));
    return problems;
  }
  if (!elf) {
    problems.push_back(make_finding("ENTRYPOINT_NOT_EXECUTABLE", target + " is not an ELF program (a script?)",
                                    "give the program the script runs with --target, or exec it directly"));
    return problems;
  }
  *machine = elf->machine;
  FileReport rep = Checker(root, root_checker_options(absolute(preload, cwd), cwd, process_env("LD_LIBRARY_PATH")))
                       .check(path, elf);
  for (const auto& f : rep.findings)
    if (f.severity == Severity::Error) problems.push_back(f);

  struct stat st;
  if (stat(out_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    problems.push_back(make_finding("OUTPUT_DIR_MISSING", "output directory " + out_dir + " does not exist",
                                    "mount a volume (emptyDir with a sizeLimit) at " + out_dir + " or pass --output-dir"));
  } else if (access(out_dir.c_str(), W_OK | X_OK) != 0) {
    problems.push_back(make_finding("OUTPUT_DIR_NOT_WRITABLE",
                                    "output directory " + out_dir + " is not writable by uid " + std::to_string(getuid()),
                                    "mount a writable volume there or chown it to the container's user"));
  } else {
    struct statvfs vfs;
    if (statvfs(out_dir.c_str(), &vfs) == 0) {
      uint64_t free_mb = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize / (1024 * 1024);
      if (free_mb < min_free_mb)
        problems.push_back(make_finding("OUTPUT_DIR_FULL", "only " + std::to_string(free_mb) +
                                                               " MiB free on the filesystem of " + out_dir + " (floor " +
                                                               std::to_string(min_free_mb) + " MiB)",
                                        "give the profile its own volume (not the application's data volume) with room "
                                        "to grow"));
    }
  }
  return problems;
}

// The control library (ctl/ctl.h), when it can load into the target: ""
// when it can, else why not.
std::string ctl_library_problem(const HostTree& root, const std::string& path, const std::string& target,
                                std::shared_ptr<const ElfInfo> target_elf, const std::string& cwd,
                                const std::string& out_dir) {
  std::shared_ptr<const ElfInfo> elf;
  try {
    elf = root.elf(path);
  } catch (const Error& e) {
    return e.what();
  }
  if (!elf) return path + " does not exist or is not an ELF library";
  if (elf->machine != target_elf->machine) return path + " is for another architecture than the target";
  // What the loader would make of it in the target: as for the profiler's
  // library, a GLIBC_ version the target's libc lacks stops the program.
  FileReport rep =
      Checker(root, root_checker_options(path, cwd, process_env("LD_LIBRARY_PATH"))).check(target, target_elf);
  // (It defines no malloc: it is not the profiler.)
  for (const auto& f : rep.findings)
    if (f.severity == Severity::Error && f.code != "PRELOAD_NO_MALLOC") return f.code + ": " + f.message;
  // The library keeps the directory's name in a PATH_MAX buffer (ctl.h); a
  // name longer than a unix socket path is fine, it binds through the
  // directory's fd. The name travels in JSON answers.
  if (out_dir.size() + 32 >= PATH_MAX)
    return "the output directory " + out_dir.substr(0, 200) + "... is longer than PATH_MAX";
  for (unsigned char c : out_dir)
    if (c < 0x20) return "the output directory's name has a control character";
  return "";
}

// The disk budget the control library enforces: the one given, else 10 %
// of the output filesystem, at most 1 GiB.
uint64_t budget_bytes(const LauncherConfig& cfg) {
  constexpr uint64_t kMiB = 1024 * 1024;
  if (cfg.max_profile_mb) return cfg.max_profile_mb * kMiB;
  struct statvfs vfs;
  if (statvfs(cfg.output_dir.c_str(), &vfs) != 0) return 1024 * kMiB;
  return std::min<uint64_t>(static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize / 10, 1024 * kMiB);
}

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? buf : path;
}

// The one ERROR line for what keeps the program from being profiled: the
// first problem with its fix, and the codes of the others.
void log_not_profiling(Logger& log, bool strict, const std::string& program, const std::string& target,
                       const std::vector<Finding>& problems) {
  const Finding& p = problems.front();
  std::string more;
  for (size_t i = 1; i < problems.size(); ++i) more += (more.empty() ? "" : ", ") + problems[i].code;
  log.error("not_profiling",
            std::string(strict ? "refusing to start " : "running unprofiled: ") + program + ": " + p.code + ": " +
                p.message + "; fix: " + p.fix + (more.empty() ? "" : " (also: " + more + ")"),
            {{"program", program}, {"target", target}, {"code", p.code}, {"fix", p.fix}, {"strict", strict}});
}

ExitCode run_exec(const ExecArgs& o) {
  Logger log(o.log_format);
  LaunchPlan plan = plan_launch(o, read_config(o.config), o.config, process_env);
  // The output directory as an absolute path: the application may chdir,
  // and the profiler and the control library resolve it after it does.
  plan.cfg.output_dir = absolute(plan.cfg.output_dir, current_dir());
  const LauncherConfig& cfg = plan.cfg;
  const bool strict = plan.strict;
  // Without its command nothing can run: said with the code preflight gives it.
  if (o.from_config && !plan.config_error.empty()) {
    Finding f = make_finding("LAUNCHER_CONFIG", plan.config_error);
    log.error("launcher_config", f.message, {{"code", f.code}});
    return ExitCode::Refused;
  }
  const std::vector<std::string>& argv = plan.argv;
  if (argv.empty() || argv[0].empty()) {
    Finding f = make_finding("LAUNCHER_CONFIG", o.from_config ? o.config + " has no entrypoint or cmd to run"
                                                              : "no PROGRAM given (exec [options] -- PROGRAM [ARGS...])");
    log.error("no_command", f.message, {{"code", f.code}});
    return ExitCode::InputError;
  }
  // The program and the target are found as preflight finds them in an
  // image: execvp's search, here over the live root.
  HostTree root("/");
  const std::string cwd = current_dir();
  const char* path_var = getenv("PATH");
  const std::string path_env = path_var ? path_var : kDefaultPath;
  auto found = lookup_program(root, argv[0], path_env, cwd);
  if (!found) {
    log.error("program_not_found",
              argv[0] + (argv[0].find('/') == std::string::npos ? " is not found on PATH" : " does not exist"),
              {{"program", argv[0]}});
    return ExitCode::NotFound;
  }
  const std::string program = found->path;
  std::vector<std::string> env = current_env();
  if (process_env("MEMPROFILE_DISABLE") == "1") {
    log.info("disabled", "MEMPROFILE_DISABLE=1: running " + program + " unprofiled", {{"program", program}});
    become(program, argv, env);
  }

  std::optional<FoundProgram> target_found = found;
  std::string target = program;
  if (!cfg.target.empty()) {
    target_found = lookup_program(root, cfg.target, path_env, cwd);
    target = target_found ? target_found->path : cfg.target;
  }
  std::vector<Finding> problems;
  uint16_t machine = 0;
  if (!plan.error.empty())
    problems.push_back(make_finding("LAUNCHER_CONFIG", plan.error, "fix the flags or " + o.config));
  else
    problems = check_everything(root, target, target_found, plan.preload, cwd, cfg.output_dir, cfg.min_free_mb, &machine);
  const bool aarch64 = machine == 183;  // EM_AARCH64
  // Dormant needs the control library: without it nothing could ever start
  // recording. Otherwise it only adds the budget and status.
  const std::string ctl_lib = absolute(cfg.ctl_library, cwd);
  std::string ctl_problem;
  if (problems.empty()) ctl_problem = ctl_library_problem(root, ctl_lib, target_found->file.path, root.elf(target_found->file.path), cwd, cfg.output_dir);
  if (!ctl_problem.empty() && cfg.dormant)
    problems.push_back(make_finding("CTL_LIBRARY_MISSING", "dormant mode needs the control library: " + ctl_problem));
  if (!problems.empty()) {
    log_not_profiling(log, strict, program, target, problems);
    if (strict) return ExitCode::Refused;
    become(program, argv, env);
  }

  // The user's own settings win over memprofile's defaults.
  const Backend backend = plan.backend;
  const std::vector<std::string> unprofiled_env = env;
  bool dispatcher = target != program;
  std::vector<std::string> added;
  for (const auto& [k, v] : backend_env(backend, cfg.output_dir, dispatcher, aarch64, cfg.dormant)) {
    // Dormant bytehound must start off and toggle on SIGUSR1, whatever the
    // environment says: start/stop send that signal.
    bool forced = cfg.dormant && (k == "MEMORY_PROFILER_DISABLE_BY_DEFAULT" || k == "MEMORY_PROFILER_REGISTER_SIGUSR1");
    if (forced)
      env.erase(std::remove_if(env.begin(), env.end(), [&](const std::string& e) { return e.rfind(k + "=", 0) == 0; }),
                env.end());
    else if (env_has(env, k))
      continue;
    env.push_back(k + "=" + v);
    added.push_back(k);
  }
  std::string lib = absolute(plan.preload, cwd);
  const bool with_ctl = ctl_problem.empty();
  const uint64_t max_bytes = budget_bytes(cfg);
  // What the backend does with the tree, said in the start line: a child
  // forked without exec is recorded (jemalloc) or not (the others), and
  // scheduled snapshots exist only where snapshots do.
  const std::string children_note = forked_children_unrecorded(backend);
  const bool can_schedule = backend == Backend::Jemalloc;
  const uint64_t snapshot_every_ms = with_ctl && can_schedule ? cfg.snapshot_every_ms : 0;
  if (with_ctl) {
    // The control library's settings are memprofile's own: a value inherited
    // from an outer launcher never applies to this process.
    env.erase(std::remove_if(env.begin(), env.end(),
                             [](const std::string& e) { return e.rfind("MEMPROFILE_CTL_", 0) == 0; }),
              env.end());
    for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"MEMPROFILE_CTL_BACKEND", to_string(backend)},
             {"MEMPROFILE_CTL_DIR", cfg.output_dir},
             {"MEMPROFILE_CTL_TARGET", real_path(target)},
             {"MEMPROFILE_CTL_RECORDING", cfg.dormant ? "0" : "1"},
             {"MEMPROFILE_CTL_MAX_BYTES", std::to_string(max_bytes)},
             {"MEMPROFILE_CTL_MIN_FREE_BYTES", std::to_string(cfg.min_free_mb * 1024 * 1024)},
             {"MEMPROFILE_CTL_SNAPSHOT_EVERY_MS", std::to_string(snapshot_every_ms)}}) {
      env.push_back(k + "=" + v);
      added.push_back(k);
    }
  } else {
    log.warn("no_control", "no disk budget and no memprofile start/stop/snapshot/status: " + ctl_problem,
             {{"ctl_library", ctl_lib}});
  }
  if (env_has(env, "LD_PRELOAD")) {
    // The user's own list stays; the control library goes after it.
    log.warn("ld_preload_set", std::string("LD_PRELOAD is already set in the environment; leaving it as it is") +
                                   (with_ctl ? ", with the control library added at its end" : ""), {});
    if (with_ctl)
      for (auto& e : env)
        if (e.rfind("LD_PRELOAD=", 0) == 0) e += ":" + ctl_lib;
  } else {
    env.push_back("LD_PRELOAD=" + lib + (with_ctl ? ":" + ctl_lib : ""));
  }
  json settings = json::array();
  for (const auto& k : added) settings.push_back(k);
  char budget_mib[32];
  snprintf(budget_mib, sizeof budget_mib, "%.1f", static_cast<double>(max_bytes) / (1024.0 * 1024.0));
  std::string budget = with_ctl ? std::string(" (budget ") + budget_mib + " MiB, keeping " +
                                       std::to_string(cfg.min_free_mb) + " MiB free)"
                                 : "";
  std::string tree = children_note.empty() ? "; forked children are recorded too, each reachable by memprofile "
                                             "start/stop/snapshot/status"
                                           : "; forked children are not recorded: " + children_note;
  if (snapshot_every_ms) tree += "; a snapshot every " + std::to_string(snapshot_every_ms / 1000) + " s while recording";
  else if (cfg.snapshot_every_ms && !can_schedule)
    tree += std::string("; --snapshot-every ignored: ") + to_string(backend) + " writes one continuous file, not snapshots";
  else if (cfg.snapshot_every_ms) tree += "; --snapshot-every ignored: it needs the control library";
  log.info("start",
           std::string(cfg.dormant ? "loaded dormant (recording off until memprofile start): " : "profiling ") +
               target + " with " + to_string(backend) + " (" + lib + "), output in " + cfg.output_dir + budget + tree,
           {{"backend", to_string(backend)},
            {"library", lib},
            {"program", program},
            {"target", target},
            {"output_dir", cfg.output_dir},
            {"dormant", cfg.dormant},
            {"control", with_ctl},
            {"max_profile_bytes", with_ctl ? json(max_bytes) : json(nullptr)},
            {"forked_children", children_note.empty() ? "recorded" : "not recorded"},
            {"snapshot_every_seconds", snapshot_every_ms / 1000},
            {"settings", settings}});
  int err = try_exec(program, argv, env);
  if (err != E2BIG) exec_failed(program, err);
  // The kernel bounds argv and the environment together (a quarter of the
  // stack limit, at most 6 MiB): one that only just fits without our
  // variables would keep the application from starting with them. Profiling
  // must never take the service down, so it runs as it would have without us.
  size_t extra = 0;
  for (size_t i = unprofiled_env.size(); i < env.size(); ++i) extra += env[i].size() + 1 + sizeof(char*);
  log_not_profiling(log, strict, program, target,
                    {make_finding("ENV_TOO_LARGE",
                                  "the environment and arguments are too large for the kernel (E2BIG) once the "
                                  "profiler's " + std::to_string(extra) + " bytes of settings are added",
                                  "make the environment or the arguments smaller")});
  if (strict) return ExitCode::Refused;
  become(program, argv, unprofiled_env);
}

}  // namespace

void setup_exec(CLI::App& app) {
  // For --help only: exec's command line belongs to the program it starts,
  // so run_exec_command_line reads it with the launcher model before CLI11
  // sees it (the same reading preflight gives an image's entrypoint).
  struct HelpOnly {
    std::deque<std::string> values;  // CLI11 keeps a reference to each
    std::vector<std::string> command;
  };
  auto help = std::make_shared<HelpOnly>();
  CLI::App* cmd = app.add_subcommand(
      "exec", "Check that the profiler will attach and record, then become PROGRAM with LD_PRELOAD set for it alone");
  for (const auto& spec : exec_option_specs()) {
    if (spec.value)
      cmd->add_option(spec.name, help->values.emplace_back(), spec.help)->type_name(spec.value);
    else
      cmd->add_flag(spec.name, spec.help);
  }
  cmd->add_option("command", help->command, "-- PROGRAM [ARGS...]");
  cmd->callback([help] {
    throw Error("memprofile exec: give memprofile's own options (-v) before exec, as in memprofile -v exec [options] -- "
                "PROGRAM [ARGS...]");
  });
}

std::optional<ExitCode> run_exec_command_line(const std::vector<std::string>& argv) {
  size_t at = exec_subcommand_index(argv);
  if (!at) return std::nullopt;
  ExecArgs args = parse_exec_args({argv.begin() + static_cast<std::ptrdiff_t>(at) + 1, argv.end()});
  if (args.help) return std::nullopt;  // CLI11 prints exec's help
  return run_exec(args);
}

}  // namespace memprofile
