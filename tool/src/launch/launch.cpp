// The launch behind `memprofile exec`, the image's entrypoint: the plan
// settled from the flags, the config file and the environment
// (runtime/launcher.cpp), the program and its target found on the live
// root, the checks that the profiler will attach, record and see the heap,
// the environment the program gets, and the execve that makes this process
// the program (no wrapper stays: PID 1 is the application, signals and exit
// code are its own). LD_PRELOAD and the backend's settings go into
// PROGRAM's environment only, never the image's, so `kubectl exec`/`kubectl
// cp` processes are not injected. A failed check never takes the service
// down unless --strict: the program runs unprofiled with one ERROR line.
#include "launch/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "image/file_tree.h"
#include "verdict/checker.h"
#include "verdict/python_target.h"
#include "verdict/heap_coverage.h"
#include "verdict/tree_users.h"

extern char** environ;

namespace memprofile {

using nlohmann::json;

namespace {


std::string current_dir_or_root() {
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
  // Text still held in either stream would be lost with the image.
  std::cout.flush();
  std::cerr.flush();
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

// Removes KEY=... entries of the keys.
void env_drop(std::vector<std::string>& env, std::initializer_list<const char*> keys) {
  env.erase(std::remove_if(env.begin(), env.end(),
                           [&](const std::string& e) {
                             for (const char* k : keys)
                               if (e.rfind(std::string(k) + "=", 0) == 0) return true;
                             return false;
                           }),
            env.end());
}

bool env_has(const std::vector<std::string>& env, const std::string& key) {
  for (const auto& e : env)
    if (e.compare(0, key.size() + 1, key + "=") == 0) return true;
  return false;
}

// The users the tree will run as besides this one (nginx's workers, as its
// `user`), as far as the program's own configuration says: "" when each can
// write the directory, else the first that cannot, in words.
std::string unwritable_for_tree(const HostTree& root, const std::string& program, const std::vector<std::string>& argv,
                                const struct stat& dir) {
  for (const auto& u : program_users(root, program, argv, getuid()))
    if (!can_write_dir(dir, u.ids))
      return "uid " + std::to_string(u.ids.uid) + " (" + u.name + ", " + u.from +
             "), as which its processes will run: they could not write their profiles";
  return "";
}

// What keeps the profiler from attaching to the target or from recording:
// the check engine against the live root, then the output directory as
// the running user sees it. Error findings only, in the order found.
std::vector<Finding> check_everything(const HostTree& root, const std::string& target, const std::vector<std::string>& argv,
                                      const std::optional<FoundProgram>& found, const std::string& preload,
                                      const std::string& cwd, const std::string& out_dir, uint64_t min_free_mb,
                                      bool is_profiler, uint16_t* machine, std::string* unwritable_by) {
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
  FileVerdict rep = Checker(root, root_checker_options(absolute(preload, cwd), cwd, process_env("LD_LIBRARY_PATH")))
                       .check(path, elf);
  // --backend none preloads the control library alone, which defines no malloc.
  for (const auto& f : rep.findings)
    if (f.severity == Severity::Error && (is_profiler || f.code != "PRELOAD_NO_MALLOC")) problems.push_back(f);

  struct stat st;
  if (stat(out_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    problems.push_back(make_finding("OUTPUT_DIR_MISSING", "output directory " + out_dir + " does not exist",
                                    "mount a volume (emptyDir with a sizeLimit) at " + out_dir + " or pass --output-dir"));
  } else if (access(out_dir.c_str(), W_OK | X_OK) != 0) {
    problems.push_back(make_finding("OUTPUT_DIR_NOT_WRITABLE",
                                    "output directory " + out_dir + " is not writable by uid " + std::to_string(getuid()),
                                    "mount a writable volume there or chown it to the container's user"));
  } else {
    // A user of the tree who cannot write it: the control library gives
    // each process that becomes one its own subdirectory (check_launch
    // decides, once it knows whether the library loads).
    *unwritable_by = unwritable_for_tree(root, path, argv, st);
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
  FileVerdict rep =
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

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? buf : path;
}

// The one ERROR line for what keeps the program from being profiled: the
// first problem with its fix, and the codes of the others.
void log_not_profiling(EventLog& log, bool strict, const std::string& program, const std::string& target,
                       const std::vector<Finding>& problems) {
  const Finding& p = problems.front();
  std::string more;
  for (size_t i = 1; i < problems.size(); ++i) more += (more.empty() ? "" : ", ") + problems[i].code;
  log.error("not_profiling",
            std::string(strict ? "refusing to start " : "running unprofiled: ") + program + ": " + p.code + ": " +
                p.message + "; fix: " + p.fix + (more.empty() ? "" : " (also: " + more + ")"),
            {{"program", program}, {"target", target}, {"code", p.code}, {"fix", p.fix}, {"strict", strict}});
}

// One launch: what the plan settled, the program found, what the checks
// said, and the environment the program gets.
struct Launch {
  Launch(const ExecArgs& args, LaunchPlan p, EventLog& events) : o(args), plan(std::move(p)), log(events) {}
  const ExecArgs& o;
  LaunchPlan plan;
  EventLog& log;
  std::string cwd, path_env;
  std::string program, target;
  std::optional<FoundProgram> target_found;
  std::vector<std::string> env, unprofiled_env, added;
  std::vector<Finding> problems;
  std::string ctl_lib, ctl_problem;
  bool aarch64 = false;
  // memray: the interpreter's options (a #! line's, or the command's), its
  // extension that must load, and the bootstrap that starts the tracker.
  std::vector<std::string> interpreter_options;
  std::string env_script;  // a #! script on the way whose env drops the bootstrap's variables
  std::string memray_extension, bootstrap_dir;
  // The heap as the target keeps it (verdict/heap_coverage.h): its own
  // profiling jemalloc, which --backend jemalloc drives in place of the
  // preloaded one; CPython, which gets PYTHONMALLOC=malloc.
  std::optional<OwnJemalloc> own_jemalloc;
  bool cpython = false;
  // gperftools' heap profiler linked into the program, driven in place of
  // the preload backend the user named (`asked`), whose malloc the
  // program's own would bypass.
  std::optional<OwnTcmalloc> own_tcmalloc;
  Backend asked = Backend::None;
  // Settings read after the control library's constructor (read_later):
  // they stay in the target's environment, and the library leaves them out
  // of what another program gets (MEMPROFILE_CTL_LATE).
  std::vector<std::string> late;
  // A user the tree becomes who cannot write the output directory, in words
  // ("" when each can): its processes get subdirectories of their own.
  std::string unwritable_by;
};

// The plan's own refusals, before anything is looked up: nullopt when it can go on.
std::optional<ExitCode> refuse_plan(Launch& l) {
  // Without its command nothing can run: said with the code preflight gives it.
  if (l.o.from_config && !l.plan.config_error.empty()) {
    Finding f = make_finding("LAUNCHER_CONFIG", l.plan.config_error);
    l.log.error("launcher_config", f.message, {{"code", f.code}});
    return ExitCode::Refused;
  }
  const std::vector<std::string>& argv = l.plan.argv;
  if (argv.empty() || argv[0].empty()) {
    Finding f = make_finding("LAUNCHER_CONFIG", l.o.from_config ? l.o.config + " has no entrypoint or cmd to run"
                                                                : "no PROGRAM given (exec [options] -- PROGRAM [ARGS...])");
    l.log.error("no_command", f.message, {{"code", f.code}});
    return ExitCode::InputError;
  }
  return std::nullopt;
}

// memray tracks the interpreter a #! script runs (console scripts such as
// gunicorn), through /usr/bin/env and nested scripts, as the kernel would
// start it; the options on the way are the interpreter's. The command's
// own words are its options when PROGRAM is the interpreter itself.
void find_interpreter(Launch& l, const HostTree& root) {
  l.interpreter_options.assign(l.plan.argv.begin() + 1, l.plan.argv.end());
  for (int depth = 0; depth < 4 && l.target_found; ++depth) {
    std::shared_ptr<const ElfInfo> elf;
    try {
      elf = root.elf(l.target_found->file.path);
    } catch (const Error&) {
      return;
    }
    if (elf) return;
    auto head = root.read(l.target_found->file.path, 256);
    auto shebang = head ? read_shebang(*head) : std::nullopt;
    if (!shebang || shebang->program.empty()) return;
    auto next = lookup_program(root, shebang->program, l.path_env, l.cwd);
    if (!next) return;  // the check says what the script is
    l.interpreter_options = shebang->args;
    if (drops_bootstrap(*shebang)) l.env_script = l.target_found->file.path;
    l.target_found = next;
    l.target = next->path;
  }
}

// The program and the target, found as preflight finds them in an image:
// execvp's search, here over the live root. False when there is no program.
bool find_programs(Launch& l, const HostTree& root) {
  const std::vector<std::string>& argv = l.plan.argv;
  auto found = lookup_program(root, argv[0], l.path_env, l.cwd);
  if (!found) {
    l.log.error("program_not_found",
                argv[0] + (argv[0].find('/') == std::string::npos ? " is not found on PATH" : " does not exist"),
                {{"program", argv[0]}});
    return false;
  }
  l.program = found->path;
  l.target_found = found;
  l.target = l.program;
  if (!l.plan.cfg.target.empty()) {
    l.target_found = lookup_program(root, l.plan.cfg.target, l.path_env, l.cwd);
    l.target = l.target_found ? l.target_found->path : l.plan.cfg.target;
  } else if (l.plan.backend == Backend::Memray) {
    find_interpreter(l, root);
  }
  return true;
}

// memray: the target must be a CPython interpreter that imports memray,
// whose compiled extension the loader resolves there (checked as the
// preload library would be: architecture, glibc, its libraries), and
// that will run memprofile's bootstrap (beside the control library).
std::vector<Finding> check_memray(Launch& l, const HostTree& root, uint16_t* machine) {
  const LauncherConfig& cfg = l.plan.cfg;
  std::shared_ptr<const ElfInfo> elf;
  if (l.target_found && l.target_found->file.node.kind == FsNode::Kind::Regular) {
    try {
      elf = root.elf(l.target_found->file.path);
    } catch (const Error&) {
    }
  }
  std::vector<Finding> problems;
  if (elf) {
    MemrayFound found;
    // The user's site-packages: HOME as the program gets it, else (as
    // Python's expanduser) the user's home in /etc/passwd.
    std::string home = process_env("HOME");
    if (home.empty()) home = passwd_home(root, getuid());
    std::string user_base = python_user_base(l.interpreter_options, process_env("PYTHONNOUSERSITE"),
                                             process_env("PYTHONUSERBASE"), home);
    problems = find_memray(root, absolute(l.target, l.cwd), l.target_found->file.path, *elf, process_env("PYTHONPATH"),
                           &found, user_base);
    l.memray_extension = found.extension;
  }
  if (!problems.empty()) return problems;
  problems = check_everything(root, l.target, l.plan.argv, l.target_found, l.memray_extension, l.cwd, cfg.output_dir,
                              cfg.min_free_mb, false, machine, &l.unwritable_by);
  if (!problems.empty()) return problems;
  l.bootstrap_dir = dirname_of(absolute(cfg.ctl_library, l.cwd)) + "/python";
  const std::string missing = missing_bootstrap(l.bootstrap_dir, [](const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  });
  if (!missing.empty())
    problems.push_back(make_finding("MEMRAY_BOOTSTRAP_MISSING", "memprofile's bootstrap " + missing + " does not exist"));
  else
    problems = bootstrap_problems(l.target, l.interpreter_options, l.env_script);
  return problems;
}

// Where the target's heap goes, for the settings that make the profile see
// it (the findings themselves came with the check): the program's own
// jemalloc to drive, and CPython's pymalloc to turn off.
void see_heap(Launch& l, const HostTree& root) {
  std::shared_ptr<const ElfInfo> elf = root.elf(l.target_found->file.path);
  if (!elf) return;
  l.cpython = managed_runtime(*elf, std::nullopt) == "cpython";
  const Backend b = l.plan.backend;
  l.own_tcmalloc = own_tcmalloc(*elf);
  if (b == Backend::Tcmalloc && !l.own_tcmalloc)
    l.problems.push_back(make_finding("LAUNCHER_CONFIG",
                                      l.target + " does not carry gperftools' heap profiler (tcmalloc linked in, "
                                                 "with HeapProfilerStart): --backend tcmalloc has nothing to drive",
                                      "choose a preload backend (jemalloc, heaptrack, bytehound) for this program"));
  if (l.own_tcmalloc && (b == Backend::Jemalloc || b == Backend::Heaptrack || b == Backend::Bytehound)) {
    l.asked = b;
    l.plan.backend = Backend::Tcmalloc;
  } else if (b != Backend::Tcmalloc) {
    l.own_tcmalloc.reset();
  }
  if (l.own_tcmalloc && l.plan.cfg.dormant)
    l.problems.push_back(make_finding("LAUNCHER_CONFIG",
                                      l.target + " carries gperftools' heap profiler, which " +
                                          dormant_unsupported(Backend::Tcmalloc),
                                      "run it without --dormant"));
  if (l.plan.backend != Backend::Jemalloc) return;
  l.own_jemalloc = own_jemalloc(*elf);
  // Dormant needs start to reach it: exported, or in the symbol table (a
  // stripped program's debug file is found, or not, only in the process).
  if (l.own_jemalloc && l.own_jemalloc->mallctl.empty() && !l.own_jemalloc->in_symtab && l.plan.cfg.dormant)
    l.problems.push_back(make_finding("LAUNCHER_CONFIG",
                                      l.target + " carries its own jemalloc, and is stripped and does not export its " +
                                          l.own_jemalloc->symbol +
                                          ": memprofile start could reach it only through a debug file, so it cannot "
                                          "start dormant",
                                      "run it without --dormant (it records from the start and dumps " +
                                          dumps_words(l.plan.cfg.dump_every_mb) +
                                          ", --dump-every-mb), keep its symbol table, or export the mallctl (link "
                                          "with -rdynamic)"));
}

// Whether the profiler will attach and record, and whether the control
// library can serve: problems, or none.
// A program that carries its own jemalloc records with it under --backend
// jemalloc: the control library is the whole preload (launch), and the
// preload jemalloc is never loaded. What is wrong with that library (not
// installed, another architecture, no malloc) is then no reason to run
// unprofiled; the control library's own check still applies.
void drop_unloaded_preload(Launch& l, const HostTree& root) {
  if (l.plan.backend != Backend::Jemalloc || !l.target_found) return;
  std::shared_ptr<const ElfInfo> elf;
  try {
    elf = root.elf(l.target_found->file.path);
  } catch (const Error&) {
    return;
  }
  if (!elf || !own_jemalloc(*elf)) return;
  l.problems.erase(std::remove_if(l.problems.begin(), l.problems.end(),
                                  [](const Finding& f) { return f.code.rfind("PRELOAD_", 0) == 0; }),
                   l.problems.end());
}

void check_launch(Launch& l, const HostTree& root) {
  const LauncherConfig& cfg = l.plan.cfg;
  uint16_t machine = 0;
  if (!l.plan.error.empty())
    l.problems.push_back(make_finding("LAUNCHER_CONFIG", l.plan.error, "fix the flags or " + l.o.config));
  else if (l.plan.backend == Backend::Memray)
    l.problems = check_memray(l, root, &machine);
  else
    l.problems = check_everything(root, l.target, l.plan.argv, l.target_found, l.plan.preload, l.cwd, cfg.output_dir, cfg.min_free_mb,
                                  l.plan.backend != Backend::None && l.plan.backend != Backend::Tcmalloc, &machine,
                                  &l.unwritable_by);
  if (l.plan.backend == Backend::Memray) {
    // The bootstrap serves the control protocol itself (its presence is
    // one of check_memray's findings): no library is preloaded, and none
    // makes subdirectories for other users.
    l.aarch64 = machine == 183;
    if (!l.unwritable_by.empty())
      l.problems.push_back(make_finding("OUTPUT_DIR_NOT_WRITABLE",
                                        "output directory " + cfg.output_dir + " is not writable by " + l.unwritable_by,
                                        "chmod 1777 " + cfg.output_dir + " (as memprofile's images make it), or "
                                        "--output-dir a directory every user of the tree can write"));
    return;
  }
  l.aarch64 = machine == 183;  // EM_AARCH64
  drop_unloaded_preload(l, root);
  if (l.problems.empty()) see_heap(l, root);
  // Dormant needs the control library: without it nothing could ever start
  // recording. Otherwise it only adds the budget and status.
  l.ctl_lib = absolute(cfg.ctl_library, l.cwd);
  if (l.problems.empty())
    l.ctl_problem = ctl_library_problem(root, l.ctl_lib, l.target_found->file.path, root.elf(l.target_found->file.path),
                                        l.cwd, cfg.output_dir);
  if (!l.ctl_problem.empty() && cfg.dormant)
    l.problems.push_back(make_finding("CTL_LIBRARY_MISSING", "dormant mode needs the control library: " + l.ctl_problem));
  if (!l.ctl_problem.empty() && l.plan.backend == Backend::None)
    l.problems.push_back(make_finding("CTL_LIBRARY_MISSING", "--backend none is the control library alone: " + l.ctl_problem));
  if (!l.ctl_problem.empty() && l.own_tcmalloc)
    l.problems.push_back(make_finding("CTL_LIBRARY_MISSING",
                                      "gperftools' heap profiler needs the control library to name each process's "
                                      "dumps by its pid (a forked child would write over its parent's): " +
                                          l.ctl_problem));
  // Without the control library no process can make its own subdirectory.
  if (!l.unwritable_by.empty() && !l.ctl_problem.empty())
    l.problems.push_back(make_finding("OUTPUT_DIR_NOT_WRITABLE",
                                      "output directory " + cfg.output_dir + " is not writable by " + l.unwritable_by +
                                          ", and without the control library (" + l.ctl_problem +
                                          ") they cannot be given subdirectories of their own",
                                      "chmod 1777 " + cfg.output_dir + " (as memprofile's images make it), or "
                                      "--output-dir a directory every user of the tree can write"));
}

// The backend's settings; the user's own win over memprofile's defaults.
void add_backend_env(Launch& l) {
  const LauncherConfig& cfg = l.plan.cfg;
  bool dispatcher = l.target != l.program;
  auto env = backend_env(l.plan.backend, cfg.output_dir, dispatcher, l.aarch64, cfg.dormant, cfg.dump_every_mb);
  // The program's own jemalloc reads its settings from its own variable
  // (_RJEM_MALLOC_CONF); no other jemalloc is loaded to read MALLOC_CONF.
  if (l.own_jemalloc)
    for (auto& [k, v] : env)
      if (k == "MALLOC_CONF") k = l.own_jemalloc->conf_env;
  // CPython: every object through malloc, where the profiler sees it.
  if (l.cpython && l.plan.backend != Backend::None) env.push_back({"PYTHONMALLOC", "malloc"});
  // gperftools times its own dumps where snapshot cannot reach it.
  if (l.own_tcmalloc && !l.own_tcmalloc->dump_export && cfg.snapshot_every_ms)
    env.push_back({"HEAP_PROFILE_TIME_INTERVAL", std::to_string(std::max<uint64_t>(1, cfg.snapshot_every_ms / 1000))});
  for (const auto& [k, v] : env) {
    // Dormant bytehound must start off and toggle on SIGUSR1, whatever the
    // environment says: start/stop send that signal.
    bool forced = cfg.dormant && (k == "MEMORY_PROFILER_DISABLE_BY_DEFAULT" || k == "MEMORY_PROFILER_REGISTER_SIGUSR1");
    if (forced) {
      const std::string set = k + "=";  // a lambda cannot capture a structured binding (C++17)
      l.env.erase(std::remove_if(l.env.begin(), l.env.end(), [&set](const std::string& e) { return e.rfind(set, 0) == 0; }),
                  l.env.end());
    } else if (env_has(l.env, k)) {
      continue;
    }
    l.env.push_back(k + "=" + v);
    // The control library takes the settings out of the environment once
    // the profiler has read them (ctl.h, spawn_scope). Two are read later,
    // so they stay: a program's own jemalloc reads its variable at its first
    // allocation, CPython PYTHONMALLOC when main starts the interpreter.
    // gperftools' heap profiler reads HEAPPROFILE in the program's own
    // initialisers, after the control library's constructor.
    bool read_later = (l.own_jemalloc && k == l.own_jemalloc->conf_env) || k == "PYTHONMALLOC" ||
                      (l.own_tcmalloc && k.rfind("HEAP", 0) == 0);
    if (!read_later) l.added.push_back(k);
    else l.late.push_back(k);
  }
}

// memray: the bootstrap first on PYTHONPATH (the user's entries after it),
// and what it reads: the interpreter to track (spawned workers run the same
// one; another program a child runs is not tracked) and whether native
// frames are recorded. memprofile's own, whatever the environment says.
void add_memray_env(Launch& l) {
  std::string pythonpath = l.bootstrap_dir;
  for (auto it = l.env.begin(); it != l.env.end();) {
    bool ours = it->rfind("MEMPROFILE_MEMRAY_TARGET=", 0) == 0 || it->rfind("MEMPROFILE_MEMRAY_NATIVE=", 0) == 0;
    if (it->rfind("PYTHONPATH=", 0) == 0) {
      if (it->size() > 11) pythonpath += ":" + it->substr(11);
      ours = true;
    }
    it = ours ? l.env.erase(it) : it + 1;
  }
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"PYTHONPATH", pythonpath},
           {"MEMPROFILE_MEMRAY_TARGET", real_path(l.target)},
           {"MEMPROFILE_MEMRAY_NATIVE", l.o.python_only ? "0" : "1"}}) {
    l.env.push_back(k + "=" + v);
    l.added.push_back(k);
  }
}

// The control library's settings are memprofile's own: a value inherited
// from an outer launcher never applies to this process.
void add_control_env(Launch& l, const std::string& lib, uint64_t max_bytes, uint64_t snapshot_every_ms) {
  const LauncherConfig& cfg = l.plan.cfg;
  // What the library takes out of the environment in the target, for its
  // children that exec another program: the profiler's library and the
  // settings added for it here (the user's own stay).
  std::string settings, late;
  for (const auto& k : l.added) settings += (settings.empty() ? "" : ",") + k;
  for (const auto& k : l.late) late += (late.empty() ? "" : ",") + k;
  l.env.erase(std::remove_if(l.env.begin(), l.env.end(), [](const std::string& e) { return e.rfind("MEMPROFILE_CTL_", 0) == 0; }),
              l.env.end());
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"MEMPROFILE_CTL_BACKEND", to_string(l.plan.backend)},
           {"MEMPROFILE_CTL_DIR", cfg.output_dir},
           {"MEMPROFILE_CTL_TARGET", real_path(l.target)},
           {"MEMPROFILE_CTL_RECORDING", cfg.dormant ? "0" : "1"},
           {"MEMPROFILE_CTL_MAX_BYTES", std::to_string(max_bytes)},
           {"MEMPROFILE_CTL_MIN_FREE_BYTES", std::to_string(cfg.min_free_mb * 1024 * 1024)},
           {"MEMPROFILE_CTL_SNAPSHOT_EVERY_MS", std::to_string(snapshot_every_ms)},
           {"MEMPROFILE_CTL_PRELOAD", lib == l.ctl_lib || l.plan.backend == Backend::Memray ? std::string() : lib},
           {"MEMPROFILE_CTL_SETTINGS", settings},
           {"MEMPROFILE_CTL_LATE", late}}) {
    l.env.push_back(k + "=" + v);
    l.added.push_back(k);
  }
  // The program's own jemalloc, by the name it exports its mallctl under.
  if (l.own_jemalloc) {
    l.env.push_back("MEMPROFILE_CTL_MALLCTL=" + l.own_jemalloc->mallctl);
    l.added.push_back("MEMPROFILE_CTL_MALLCTL");
    if (!l.own_jemalloc->symbol.empty()) {
      l.env.push_back("MEMPROFILE_CTL_MALLCTL_SYMBOL=" + l.own_jemalloc->symbol);
      l.added.push_back("MEMPROFILE_CTL_MALLCTL_SYMBOL");
    }
  }
}

// LD_PRELOAD: the profiler, then the control library. The user's own list
// stays; the control library goes after it.
void add_preload(Launch& l, const std::string& lib, bool with_ctl) {
  if (env_has(l.env, "LD_PRELOAD")) {
    l.log.warn("ld_preload_set", std::string("LD_PRELOAD is already set in the environment; leaving it as it is") +
                                     (with_ctl ? ", with the control library added at its end" : ""), {});
    if (with_ctl)
      for (auto& e : l.env)
        if (e.rfind("LD_PRELOAD=", 0) == 0) e += ":" + l.ctl_lib;
  } else {
    // --backend none: the control library is the preload, once.
    l.env.push_back("LD_PRELOAD=" + lib + (with_ctl && lib != l.ctl_lib ? ":" + l.ctl_lib : ""));
  }
}

// What records, in words: the preloaded library, or the program's own
// jemalloc or gperftools' heap profiler and how the control library reaches it.
std::string recorder_words(const Launch& l, const std::string& lib) {
  if (l.own_tcmalloc)
    return std::string("gperftools' heap profiler, linked into it, through HEAPPROFILE") +
           (l.asked == Backend::None ? "" : std::string(", in place of ") + to_string(l.asked) +
                                                ", whose malloc the program's own would bypass") +
           "; " +
           (l.own_tcmalloc->dump_export ? "snapshot through HeapProfilerDump"
                                        : "it exports no HeapProfilerDump, so snapshot cannot reach it: it dumps every "
                                          "1 GiB allocated, every 100 MiB of growth and at exit");
  if (!l.own_jemalloc) return lib;
  std::string reach = l.own_jemalloc->reach();
  // Where nothing reaches it, its own interval is what the user has: say
  // the one set.
  if (l.own_jemalloc->mallctl.empty() && !l.own_jemalloc->in_symtab)
    reach += "; here it dumps " + dumps_words(l.plan.cfg.dump_every_mb) + " (--dump-every-mb)";
  return "its own jemalloc, linked into it, through " + l.own_jemalloc->conf_env + "; " + reach;
}

// The start line: what is profiled, with what, where, within which budget,
// and what the backend does with the tree (a child forked without exec is
// recorded, jemalloc, or not, the others; scheduled snapshots exist only
// where snapshots do).
void log_start(Launch& l, const std::string& lib, bool with_ctl, uint64_t max_bytes, uint64_t snapshot_every_ms) {
  const LauncherConfig& cfg = l.plan.cfg;
  const Backend backend = l.plan.backend;
  const std::string children_note = forked_children_unrecorded(backend);
  json settings = json::array();
  for (const auto& k : l.added) settings.push_back(k);
  char budget_mib[32];
  snprintf(budget_mib, sizeof budget_mib, "%.1f", static_cast<double>(max_bytes) / (1024.0 * 1024.0));
  std::string budget = with_ctl ? std::string(" (budget ") + budget_mib + " MiB, keeping " +
                                       std::to_string(cfg.min_free_mb) + " MiB free)"
                                 : "";
  std::string tree = backend == Backend::Memray
                         ? std::string("; ") + (l.o.python_only ? "Python frames only" : "native frames too") +
                               "; forked children are recorded too, each in its own capture (memray.PID.bin.CHILD), "
                               "and the interpreters it spawns in theirs (memray.PID.bin), each reachable by "
                               "memprofile start/stop/status"
                     : backend == Backend::None ? "; forked children too, each reachable by memprofile status/snapshot"
                     : backend == Backend::Tcmalloc
                         ? "; forked children are recorded too, each in dumps of its own pid (tcmalloc.PID.SEQ.heap), "
                           "reachable by memprofile snapshot/status"
                     : children_note.empty()   ? "; forked children are recorded too, each reachable by memprofile "
                                                 "start/stop/snapshot/status"
                                           : "; forked children are not recorded: " + children_note;
  if (snapshot_every_ms && backend == Backend::None)
    tree += "; a memory record every " + std::to_string(snapshot_every_ms / 1000) + " s in each process";
  else if (snapshot_every_ms && backend == Backend::Memray)
    tree += "; a snapshot mark every " + std::to_string(snapshot_every_ms / 1000) +
            " s while recording (memray-marks.*: report ends a span of the capture at each)";
  else if (snapshot_every_ms) tree += "; a snapshot every " + std::to_string(snapshot_every_ms / 1000) + " s while recording";
  else if (cfg.snapshot_every_ms && !takes_snapshots(backend))
    tree += std::string("; --snapshot-every ignored: ") + to_string(backend) + " writes one continuous file, not snapshots";
  else if (cfg.snapshot_every_ms) tree += "; --snapshot-every ignored: it needs the control library";
  const std::string what =
      backend == Backend::None
          ? "watching the memory of " + l.target + " with the control library alone (" + lib +
                ", no heap profiler: memprofile status and snapshot give RSS, the allocator's view and the cgroup's)"
      : backend == Backend::Memray
          ? std::string(cfg.dormant ? "loaded dormant (memray's tracker off until memprofile start): "
                                    : "profiling ") +
                l.target + " with memray (" + lib + "), started by memprofile's bootstrap " + l.bootstrap_dir +
                "/sitecustomize.py, which serves memprofile start/stop/status"
          : std::string(cfg.dormant ? "loaded dormant (recording off until memprofile start): " : "profiling ") +
                l.target + " with " + to_string(backend) + " (" + recorder_words(l, lib) + ")" +
                (l.cpython && backend != Backend::None && !env_has(l.unprofiled_env, "PYTHONMALLOC")
                     ? ", PYTHONMALLOC=malloc so that every Python object goes through malloc"
                     : "");
  if (!l.unwritable_by.empty() && with_ctl)
    tree += "; the directory is not writable by " + l.unwritable_by.substr(0, l.unwritable_by.find(", as which")) +
            ": each process that becomes that user writes to a subdirectory of its own, " + cfg.output_dir +
            "/proc.PID, owned by it (chmod 1777 " + cfg.output_dir + " keeps them all in one)";
  l.log.info("start", what + ", output in " + cfg.output_dir + budget + tree,
             {{"backend", to_string(backend)},
              {"library", lib},
              {"program", l.program},
              {"target", l.target},
              {"output_dir", cfg.output_dir},
              {"dormant", cfg.dormant},
              {"control", with_ctl},
              {"max_profile_bytes", with_ctl ? json(max_bytes) : json(nullptr)},
              {"forked_children", children_note.empty() ? "recorded" : "not recorded"},
              {"snapshot_every_seconds", snapshot_every_ms / 1000},
              {"settings", settings}});
}

// execve failed with E2BIG: the kernel bounds argv and the environment
// together (a quarter of the stack limit, at most 6 MiB), and one that only
// just fits without our variables would keep the application from starting
// with them. Profiling must never take the service down, so it runs as it
// would have without us.
ExitCode run_unprofiled_too_large(Launch& l) {
  size_t extra = 0;
  for (size_t i = l.unprofiled_env.size(); i < l.env.size(); ++i) extra += l.env[i].size() + 1 + sizeof(char*);
  log_not_profiling(l.log, l.plan.strict, l.program, l.target,
                    {make_finding("ENV_TOO_LARGE",
                                  "the environment and arguments are too large for the kernel (E2BIG) once the "
                                  "profiler's " + std::to_string(extra) + " bytes of settings are added",
                                  "make the environment or the arguments smaller")});
  if (l.plan.strict) return ExitCode::Refused;
  become(l.program, l.plan.argv, l.unprofiled_env);
}

}  // namespace

ExitCode launch(const ExecArgs& o, EventLog& log, const ServeBeside& serve_beside) {
  Launch l(o, plan_launch(o, read_config(o.config), o.config, process_env), log);
  // The output directory as an absolute path: the application may chdir,
  // and the profiler and the control library resolve it after it does.
  l.cwd = current_dir_or_root();
  l.plan.cfg.output_dir = absolute(l.plan.cfg.output_dir, l.cwd);
  if (auto refused = refuse_plan(l)) return *refused;
  const char* path_var = getenv("PATH");
  l.path_env = path_var ? path_var : kDefaultPath;
  HostTree root("/");
  if (!find_programs(l, root)) return ExitCode::NotFound;
  l.env = current_env();
  if (process_env("MEMPROFILE_DISABLE") == "1") {
    l.log.info("disabled", "MEMPROFILE_DISABLE=1: running " + l.program + " unprofiled", {{"program", l.program}});
    become(l.program, l.plan.argv, l.env);
  }
  check_launch(l, root);
  if (!l.problems.empty()) {
    log_not_profiling(l.log, l.plan.strict, l.program, l.target, l.problems);
    if (l.plan.strict) return ExitCode::Refused;
    become(l.program, l.plan.argv, l.env);
  }
  l.unprofiled_env = l.env;
  add_backend_env(l);
  const bool memray = l.plan.backend == Backend::Memray;
  if (memray) add_memray_env(l);
  const bool with_ctl = l.ctl_problem.empty();
  // The program's own jemalloc records: the control library is the whole preload.
  const std::string lib = memray ? l.memray_extension
                           : (l.own_jemalloc || l.own_tcmalloc) && with_ctl ? l.ctl_lib
                                                                             : absolute(l.plan.preload, l.cwd);
  const uint64_t max_bytes = profile_budget_bytes(l.plan.cfg);
  const uint64_t snapshot_every_ms = with_ctl && takes_snapshots(l.plan.backend) ? l.plan.cfg.snapshot_every_ms : 0;
  if ((l.plan.backend == Backend::None || memray) && !l.plan.cfg.preload.empty())
    l.log.warn("preload_unused",
               std::string(memray ? "--backend memray preloads nothing (the bootstrap imports memray)"
                                  : "--backend none loads no profiler") +
                   ": the preload " + l.plan.cfg.preload + " is not loaded",
               {{"preload", l.plan.cfg.preload}});
  if (with_ctl)
    add_control_env(l, lib, max_bytes, snapshot_every_ms);
  else
    l.log.warn("no_control", "no disk budget and no memprofile start/stop/snapshot/status: " + l.ctl_problem,
               {{"ctl_library", l.ctl_lib}});
  // (A program's own jemalloc without the control library: nothing to
  // preload, and the preloaded jemalloc would write dumps of the same names.)
  if (!memray && !(l.own_jemalloc && !with_ctl)) add_preload(l, lib, with_ctl);
  log_start(l, lib, with_ctl, max_bytes, snapshot_every_ms);
  if (!l.plan.cfg.serve.empty() && serve_beside) serve_beside(l.plan.cfg, l.ctl_problem, l.log);
  // The program's own processes start no second serve on the same port.
  env_drop(l.env, {"MEMPROFILE_SERVE", "MEMPROFILE_SERVE_TOKEN_FILE"});
  int err = try_exec(l.program, l.plan.argv, l.env);
  if (err != E2BIG) exec_failed(l.program, err);
  return run_unprofiled_too_large(l);
}


}  // namespace memprofile
