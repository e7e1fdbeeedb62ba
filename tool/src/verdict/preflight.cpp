#include "verdict/preflight.h"

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/unique_fd.h"
#include "image/image_tree.h"
#include "image/layer.h"
#include "runtime/launcher.h"
#include "runtime/backend.h"
#include "verdict/tree_users.h"
#include "verdict/python_target.h"

namespace memprofile {

namespace {

constexpr int kMaxScripts = 4;
constexpr size_t kMaxDispatchCandidates = 20000;

std::vector<std::string> split(const std::string& s, const char* seps) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find_first_of(seps, i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

bool is_executable_file(const std::optional<Resolved>& r) {
  return r && r->node.kind == FsNode::Kind::Regular && (r->node.mode & 0111);
}

// `memprofile exec ...` as the entrypoint: what the launcher will run and
// with which settings, read by the launcher's own model (verdict/launcher.h)
// over the image: its config file, the image's Env as the launcher's
// environment, its flags.
struct LauncherUse {
  std::string path;
  LaunchPlan plan;
  std::string error;  // why it will not profile (LAUNCHER_CONFIG)
};

std::optional<LauncherUse> launcher_of(const FileTree& tree, const ImageConfig& image, const std::vector<std::string>& argv,
                                       const std::string& path_env, const std::string& cwd) {
  size_t sub = exec_subcommand_index(argv);
  if (!sub) return std::nullopt;
  auto found = lookup_program(tree, argv[0], path_env, cwd);
  if (!found || !found->executable()) return std::nullopt;
  const std::string& path = found->file.path;
  std::string base = path.substr(path.rfind('/') + 1);
  if (base != "memprofile" && base != "memprofile-static") return std::nullopt;
  ExecArgs args = parse_exec_args({argv.begin() + static_cast<std::ptrdiff_t>(sub) + 1, argv.end()});
  std::string cfg_path = !args.config.empty() && args.config[0] == '/' ? args.config : normalize_path(cwd + "/" + args.config);
  std::optional<std::string> text;
  std::string read_error;
  try {
    text = tree.read(cfg_path, 64 * 1024);
  } catch (const Error& e) {
    read_error = e.what();
  }
  LauncherUse use;
  use.path = path;
  use.plan = plan_launch(args, text, cfg_path, [&](const char* name) { return image.env_value(name); });
  use.error = !args.error.empty() ? args.error : !read_error.empty() ? read_error : use.plan.error;
  if (use.plan.argv.empty() && use.error.empty())
    use.error = args.from_config ? args.config + " has no entrypoint or cmd for memprofile exec --from-config"
                                 : "memprofile exec is the entrypoint but is given no command";
  return use;
}

std::shared_ptr<const std::string> strings_of(const FileTree& tree, const std::string& path) {
  if (auto* image = dynamic_cast<const ImageTree*>(&tree)) return image->path_strings(path);
  if (auto* host = dynamic_cast<const HostTree*>(&tree)) {
    UniqueFd fd(host->open_file(path));
    if (!fd) return nullptr;
    FdReader r(fd.get(), path);
    return scan_path_strings(r);
  }
  return nullptr;
}

// Programs that mention /bin/sh (system(3), popen(3)) do not dispatch to it.
bool is_shell(const std::string& path) {
  std::string base = path.substr(path.rfind('/') + 1);
  for (const char* sh : {"sh", "bash", "dash", "ash", "zsh", "busybox", "env"})
    if (base == sh) return true;
  return false;
}

std::string config_arch(const std::string& machine) {
  if (machine == "x86_64") return "amd64";
  if (machine == "aarch64") return "arm64";
  if (machine == "i386") return "386";
  return machine;
}

struct PasswdEntry {
  std::string name;
  uint32_t uid, gid;
};

bool parse_id(const std::string& s, uint32_t* out) {
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  unsigned long v = std::stoul(s);
  if (v > 0xffffffffUL) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

std::vector<std::vector<std::string>> colon_file(const FileTree& tree, const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  auto r = try_resolve(tree, path);
  if (!r || r->node.kind != FsNode::Kind::Regular) return rows;
  auto text = tree.read(r->path, 4 << 20);
  if (!text) return rows;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols;
    size_t i = 0;
    while (i <= line.size()) {
      size_t j = line.find(':', i);
      if (j == std::string::npos) j = line.size();
      cols.push_back(line.substr(i, j - i));
      i = j + 1;
    }
    rows.push_back(std::move(cols));
  }
  return rows;
}

}  // namespace

bool PreflightResult::ready() const {
  return std::none_of(findings.begin(), findings.end(), [](const Finding& f) { return f.severity == Severity::Error; });
}

std::string backend_of(const std::string& preload_path) {
  std::string base = preload_path.substr(preload_path.rfind('/') + 1);
  for (const BackendRow& row : backend_rows())
    if (row.preload_word && base.find(row.preload_word) != std::string::npos) return row.name;
  return "unknown";
}

bool resolve_user(const FileTree& tree, const std::string& user, UserIds* out, std::string* error) {
  *out = UserIds{};
  if (user.empty()) return true;
  std::string u = user, g;
  if (size_t c = user.find(':'); c != std::string::npos) {
    u = user.substr(0, c);
    g = user.substr(c + 1);
  }
  auto passwd = colon_file(tree, "/etc/passwd");
  std::string name;
  bool known_gid = false;
  if (parse_id(u, &out->uid)) {
    for (const auto& row : passwd)
      if (row.size() >= 4 && row[2] == u) {
        name = row[0];
        known_gid = parse_id(row[3], &out->gid);
      }
  } else {
    bool found = false;
    for (const auto& row : passwd)
      if (row.size() >= 4 && row[0] == u && parse_id(row[2], &out->uid)) {
        found = true;
        name = u;
        known_gid = parse_id(row[3], &out->gid);
      }
    if (!found) {
      *error = "user '" + u + "' is not in the image's /etc/passwd: the container will not start";
      return false;
    }
  }
  auto group = colon_file(tree, "/etc/group");
  if (!g.empty()) {
    if (!parse_id(g, &out->gid)) {
      bool found = false;
      for (const auto& row : group)
        if (row.size() >= 3 && row[0] == g && parse_id(row[2], &out->gid)) found = true;
      if (!found) {
        *error = "group '" + g + "' is not in the image's /etc/group";
        return false;
      }
    }
  } else if (!known_gid) {
    out->gid = 0;  // runc, Docker and podman run a uid without a passwd entry with gid 0
  }
  if (!name.empty())
    for (const auto& row : group)
      if (row.size() >= 4) {
        uint32_t gid;
        for (const auto& member : split(row[3], ","))
          if (member == name && parse_id(row[2], &gid)) out->groups.push_back(gid);
      }
  return true;
}

namespace {

// Everything the steps of preflight() share: the image, what its config
// says, and what the earlier steps found. Each step reads what the steps
// before it set and adds its findings in order.
struct Context {
  Context(const LoadedImage& image, const PreflightOptions& o) : tree(*image.tree), cfg(image.config), opts(o) {
    bool path_set = false;
    path_env = cfg.env_value("PATH", &path_set);
    if (!path_set) path_env = kDefaultPath;
    cwd = cfg.working_dir.empty() ? "/" : cfg.working_dir;
  }

  const FileTree& tree;
  const ImageConfig& cfg;
  const PreflightOptions& opts;
  std::string path_env;  // the image's PATH, or the default
  std::string cwd;       // its WorkingDir, or "/"
  PreflightResult res;
  std::optional<LauncherUse> launcher;             // a `memprofile exec` entrypoint
  std::string target_path;                         // --target, else the launcher's
  std::optional<Resolved> entry;                   // what argv[0] starts, after #! scripts
  std::shared_ptr<const ElfInfo> entry_elf;
  std::optional<Resolved> target;                  // the process judged
  UserIds ids;                                     // the image's User
  bool user_ok = false;
  bool memray = false;                             // --backend memray, or the launcher's
  std::string invoked;                             // the interpreter as named, before links
  std::string target_invoked;                      // --target as found, before links
  std::vector<std::string> interpreter_options;    // its words: argv's, or the #! line's
  std::string env_script;                          // a #! env on the way drops the bootstrap's variables

  void add(Finding f) { res.findings.push_back(std::move(f)); }
};

// How the image's programs start: with this preload library, from its
// WorkingDir, with its LD_LIBRARY_PATH (every program of the image inherits
// it, the dispatched ones too).
CheckerOptions checker_options(const Context& ctx, const std::string& preload) {
  return root_checker_options(preload, ctx.cwd, ctx.cfg.env_value("LD_LIBRARY_PATH"));
}

// memprofile exec as the entrypoint: the launcher is static and sets
// LD_PRELOAD for its command only, so that command is what is judged.
void resolve_launcher(Context& ctx) {
  ctx.res.argv = ctx.cfg.entrypoint;
  ctx.res.argv.insert(ctx.res.argv.end(), ctx.cfg.cmd.begin(), ctx.cfg.cmd.end());
  ctx.target_path = ctx.opts.target;
  ctx.launcher = launcher_of(ctx.tree, ctx.cfg, ctx.res.argv, ctx.path_env, ctx.cwd);
  ctx.memray = ctx.opts.backend == "memray" || (ctx.launcher && ctx.launcher->plan.backend == Backend::Memray);
  if (!ctx.launcher) return;
  const LauncherUse& use = *ctx.launcher;
  const LaunchPlan& plan = use.plan;
  ctx.res.launcher =
      LauncherSettings{use.path, to_string(plan.backend), plan.preload, plan.cfg.output_dir, plan.cfg.target};
  if (!use.error.empty()) ctx.add(make_finding("LAUNCHER_CONFIG", use.error));
  std::string cmdline;
  for (const auto& a : plan.argv) cmdline += (cmdline.empty() ? "" : " ") + a;
  ctx.add(make_finding("LAUNCHER", use.path + " exec starts `" + cmdline + "` with " + ctx.res.launcher->backend +
                                       (plan.preload.empty() ? "" : " (" + plan.preload + ")") + ", output in " +
                                       ctx.res.launcher->output_dir));
  ctx.res.argv = plan.argv;
  if (ctx.target_path.empty()) ctx.target_path = plan.cfg.target;
}

// The program the container starts, through any #! scripts.
void follow_entrypoint(Context& ctx) {
  PreflightResult& res = ctx.res;
  if (res.argv.empty() || res.argv[0].empty()) {
    if (ctx.target_path.empty() && !(ctx.launcher && !ctx.launcher->error.empty()))
      ctx.add(make_finding("NO_ENTRYPOINT", "the image config has neither Entrypoint nor Cmd: nothing to judge"));
    return;
  }
  std::string name = res.argv[0];
  ctx.interpreter_options.assign(res.argv.begin() + 1, res.argv.end());
  for (int depth = 0; depth <= kMaxScripts; ++depth) {
    auto found = lookup_program(ctx.tree, name, ctx.path_env, ctx.cwd);
    auto r = found && found->executable() ? std::optional<Resolved>(found->file) : std::nullopt;
    if (!r) {
      ctx.add(make_finding("ENTRYPOINT_MISSING",
                           "'" + name + "'" + (depth ? " (the interpreter of " + res.scripts.back() + ")" : "") +
                               (name.find('/') == std::string::npos ? " is not found on PATH " + ctx.path_env
                                                                    : " does not exist or is not executable") +
                               " in the image"));
      break;
    }
    std::shared_ptr<const ElfInfo> elf;
    try {
      elf = ctx.tree.elf(r->path);
    } catch (const Error& e) {
      ctx.add(make_finding("ENTRYPOINT_NOT_EXECUTABLE", std::string("cannot read the program: ") + e.what()));
      break;
    }
    if (elf) {
      ctx.entry = r;
      ctx.entry_elf = elf;
      ctx.invoked = found->path[0] == '/' ? found->path : normalize_path(ctx.cwd + "/" + found->path);
      break;
    }
    auto head = ctx.tree.read(r->path, 256);
    auto shebang = head ? read_shebang(*head) : std::nullopt;
    if (!shebang) {
      ctx.add(make_finding("ENTRYPOINT_NOT_EXECUTABLE", r->path + " is neither an ELF program nor a #! script"));
      break;
    }
    res.scripts.push_back(r->path);
    if (shebang->program.empty()) {
      ctx.add(make_finding("ENTRYPOINT_NOT_EXECUTABLE",
                           r->path + (shebang->error.empty() ? " has an empty #! line"
                                                             : "'s #! line fails: " + shebang->error)));
      break;
    }
    name = shebang->program;
    ctx.interpreter_options = shebang->args;
    if (drops_bootstrap(*shebang) && ctx.env_script.empty()) ctx.env_script = r->path;
    if (shebang->changes("LD_PRELOAD") && !ctx.memray)
      ctx.add(make_finding("SCRIPT_ENV_DROPS_PRELOAD", r->path + "'s #! line runs env with -i, -u or an assignment "
                                                       "that drops LD_PRELOAD: " + shebang->program +
                                                       " starts without the profiler"));
    if (depth == kMaxScripts) ctx.add(make_finding("ENTRYPOINT_NOT_EXECUTABLE", "too many nested #! interpreters"));
  }
  if (!ctx.entry) return;
  if (!res.scripts.empty() && !ctx.memray)
    ctx.add(make_finding("ENTRYPOINT_SCRIPT", "the entrypoint is a script (" + res.scripts.front() + ") run by " +
                                                  ctx.entry->path +
                                                  ": LD_PRELOAD in the environment also loads into the interpreter"));
  res.program = ctx.entry->path;
}

// /proc, /sys and /dev hold the kernel's files, not the image's: under
// --rootfs / (the verify step of an image build) /proc/self/exe, which
// Rust's std names, is memprofile itself.
bool names_kernel_files(const std::string& path) {
  for (const char* dir : {"/proc", "/sys", "/dev"})
    if (path.rfind(dir, 0) == 0 && (path.size() == std::strlen(dir) || path[std::strlen(dir)] == '/')) return true;
  return false;
}

// Dispatchers: other programs in the image whose paths the entrypoint names.
// Only a program named directly by the config can be one: an interpreter
// names /bin/sh and friends without dispatching to them.
void find_dispatch_targets(Context& ctx) {
  // memray's bootstrap rides PYTHONPATH, which a dispatcher passes on: the
  // interpreter (--target) is what is judged.
  if (!ctx.entry || !ctx.res.scripts.empty() || ctx.memray) return;
  auto strings = strings_of(ctx.tree, ctx.entry->path);
  if (!strings) return;
  std::set<std::string> seen;
  size_t candidates = 0;
  for (const auto& run : split(*strings, "\n")) {
    for (size_t a = 0; a < run.size() && candidates < kMaxDispatchCandidates; ++a) {
      if (run[a] != '/') continue;
      for (size_t b = a + 1; b <= run.size(); ++b) {
        if (b != run.size() && run[b] != '/') continue;
        std::string cand = run.substr(a, b - a);
        if (++candidates > kMaxDispatchCandidates) break;
        if (cand.size() < 3 || seen.count(cand) || names_kernel_files(cand)) continue;
        seen.insert(cand);
        auto r = try_resolve(ctx.tree, cand);
        if (!is_executable_file(r) || r->path == ctx.entry->path || is_shell(r->path)) continue;
        std::shared_ptr<const ElfInfo> e;
        try {
          e = ctx.tree.elf(r->path);
        } catch (const Error&) {
          continue;
        }
        if (!e || !e->is_program()) continue;
        if (std::any_of(ctx.res.dispatch.begin(), ctx.res.dispatch.end(),
                        [&](const DispatchedProgram& d) { return d.path == r->path; }))
          continue;
        DispatchedProgram d;
        d.path = r->path;
        d.named_as = cand;
        d.linkage = to_string(e->linkage);
        ctx.res.dispatch.push_back(d);
      }
    }
  }
}

// The process to judge: --target (or the launcher's), else the entrypoint.
void pick_target(Context& ctx) {
  ctx.target = ctx.entry;
  if (ctx.target_path.empty()) return;
  auto found = lookup_program(ctx.tree, ctx.target_path, ctx.path_env, ctx.cwd);
  if (!found || !found->executable()) {
    ctx.add(make_finding("TARGET_NOT_FOUND", "--target " + ctx.target_path + " is not an executable file in the image"));
    ctx.target.reset();
  } else {
    ctx.target = found->file;
    ctx.target_invoked = found->path[0] == '/' ? found->path : normalize_path(ctx.cwd + "/" + found->path);
  }
}

// The preload library: --preload, the launcher's, else LD_PRELOAD in the
// image's Env; and its profiler.
void pick_preload(Context& ctx) {
  PreflightResult& res = ctx.res;
  if (ctx.memray) return;  // judge_memray finds what loads instead
  bool env_preload_set = false;
  std::string env_preload = ctx.cfg.env_value("LD_PRELOAD", &env_preload_set);
  if (env_preload_set && !env_preload.empty())
    ctx.add(make_finding("LD_PRELOAD_IN_IMAGE_ENV",
                         "LD_PRELOAD=" + env_preload + " is in the image ENV: it loads into every process of the "
                         "container, including `kubectl exec` shells and the tar behind `kubectl cp` (which crashes "
                         "under bytehound)"));
  res.preload = ctx.opts.preload;
  if (res.preload.empty() && res.launcher) res.preload = res.launcher->preload;
  if (res.preload.empty() && !env_preload.empty()) {
    // glibc's handle_preload_list: split at spaces and colons, skip empty
    // items and items of PATH_MAX bytes or more, load every other one. The
    // one judged is the first that names a profiler, else the first.
    std::vector<std::string> items;
    for (auto& item : split(env_preload, ": "))
      if (item.size() < 4096) items.push_back(std::move(item));
    auto profiler = std::find_if(items.begin(), items.end(), [](const std::string& i) { return !backend_of(i).empty(); });
    if (profiler != items.end()) res.preload = *profiler;
    else if (!items.empty()) res.preload = items.front();
  }
  if (res.preload.empty())
    ctx.add(make_finding("NO_PRELOAD", "no preload library named (no LD_PRELOAD in the image ENV, no --preload): judged "
                                       "whether one could attach"));
  res.backend = res.preload.empty() ? "" : backend_of(res.preload);
  if (res.launcher && res.preload == res.launcher->preload) res.backend = res.launcher->backend;
}

// The image's User, through its /etc/passwd and /etc/group.
void resolve_run_user(Context& ctx) {
  std::string user_error;
  ctx.user_ok = resolve_user(ctx.tree, ctx.cfg.user, &ctx.ids, &user_error);
  if (!ctx.user_ok) ctx.add(make_finding("USER_UNKNOWN", user_error));
}

// The target's ELF facts: null when it is none, a finding when it cannot
// be read.
std::shared_ptr<const ElfInfo> target_elf(Context& ctx, const std::string& path) {
  try {
    return ctx.tree.elf(path);
  } catch (const Error& e) {
    ctx.add(make_finding("ENTRYPOINT_NOT_EXECUTABLE", std::string("cannot read the target: ") + e.what()));
    return nullptr;
  }
}

// The image config's platform must be the target's.
void check_platform(Context& ctx, const std::string& path, const ElfInfo& elf) {
  const std::string& arch = ctx.cfg.platform.architecture;
  if (!arch.empty() && arch != config_arch(machine_name(elf.machine)))
    ctx.add(make_finding("PLATFORM_MISMATCH",
                         "the image config says " + arch + " but " + path + " is " + machine_name(elf.machine)));
}

// The launcher must run where its target runs.
void check_launcher_arch(Context& ctx, const std::string& path, const ElfInfo& elf) {
  if (!ctx.res.launcher) return;
  const std::string& launcher = ctx.res.launcher->path;
  try {
    auto lelf = ctx.tree.elf(launcher);
    if (lelf && lelf->machine != elf.machine)
      ctx.add(make_finding("LAUNCHER_WRONG_ARCH", launcher + " is " + machine_name(lelf->machine) + " but " + path +
                                                      " is " + machine_name(elf.machine)));
  } catch (const Error&) {
  }
}

// The target against the image: the check engine's findings, then what the
// config adds (the user's ids, the platform, the launcher's architecture).
void judge_target(Context& ctx) {
  if (!ctx.target || ctx.memray) return;
  const std::string& path = ctx.target->path;
  std::shared_ptr<const ElfInfo> elf = target_elf(ctx, path);
  if (!elf) return;
  FileVerdict rep = Checker(ctx.tree, checker_options(ctx, ctx.res.preload)).check(path, elf);
  for (const auto& f : rep.findings) ctx.add(f);
  // The kernel sets AT_SECURE when exec changes the effective ids or
  // grants capabilities to a non-root user.
  const UserIds& ids = ctx.ids;
  bool in_group = rep.gid == ids.gid || std::count(ids.groups.begin(), ids.groups.end(), rep.gid);
  bool secure = ((rep.mode & S_ISUID) && rep.uid != ids.uid) || ((rep.mode & S_ISGID) && !in_group) ||
                (rep.file_caps && ids.uid != 0);
  if (ctx.user_ok && secure && (rep.mode & 0111))
    ctx.add(make_finding("SETUID_AS_USER", path + " is setuid/setgid or has file capabilities and the image runs as user " +
                                               (ctx.cfg.user.empty() ? std::string("root") : ctx.cfg.user) +
                                               ": AT_SECURE is set and glibc ignores LD_PRELOAD entries containing '/'"));
  check_platform(ctx, path, *elf);
  check_launcher_arch(ctx, path, *elf);
  // Dormant: only the control library can ever start recording.
  if (ctx.launcher && ctx.launcher->plan.cfg.dormant) {
    const std::string& ctl = ctx.launcher->plan.cfg.ctl_library;
    std::string problem;
    try {
      auto celf = ctx.tree.elf(ctl);
      if (!celf) problem = ctl + " is not in the image (or not an ELF library)";
      else if (celf->machine != elf->machine)
        problem = ctl + " is " + machine_name(celf->machine) + " but " + path + " is " + machine_name(elf->machine);
    } catch (const Error& e) {
      problem = e.what();
    }
    if (!problem.empty())
      ctx.add(make_finding("CTL_LIBRARY_MISSING", "the launcher starts the profiler dormant, and " + problem));
  }
  ctx.res.target = std::move(rep);
}

// The interpreter's facts for the memray image build: Debian's when the
// image is Debian (os-release), the package Debian names python3.X-minimal
// is installed and the interpreter is its /usr/bin/python3.X, or a venv's
// made from it (a venv without the system's site-packages is said too:
// Debian's memray would not be imported there, one built for it would).
std::optional<PythonFacts> python_facts(const FileTree& tree, const std::string& path, const std::string& invoked,
                                        const ElfInfo& elf) {
  auto v = python_version(path, elf);
  if (!v) v = venv_version(tree, invoked);  // a --copies venv's interpreter, named python
  if (!v) return std::nullopt;
  PythonFacts py;
  py.interpreter = path;
  py.version = to_string(*v);
  py.invoked = invoked;
  py.debian = debian_system(tree);
  bool with_base = false;
  py.isolated_venv = !venv_dirs(tree, invoked, *v, &with_base).empty() && !with_base;
  py.install = python_install(tree, path, invoked, *v);
  std::string package = "python" + std::to_string(v->major) + "." + std::to_string(v->minor) + "-minimal";
  if (py.debian && py.debian->id == "debian" && py.debian->find(package) && v->abiflags.empty() &&
      base_interpreter(tree, path, invoked, *v) == "/usr/bin/python" + std::to_string(v->major) + "." + std::to_string(v->minor))
    py.debian_package = package;
  return py;
}

// memray: the target must be a CPython interpreter whose sys.path in the
// image imports memray, with the compiled extension for its version and
// architecture, which the loader model then resolves as it would a preload
// library; and memprofile's bootstrap must be there and not skipped.
void judge_memray(Context& ctx) {
  if (!ctx.memray || !ctx.target) return;
  PreflightResult& res = ctx.res;
  res.backend = "memray";
  const std::string& path = ctx.target->path;
  std::shared_ptr<const ElfInfo> elf = target_elf(ctx, path);
  if (!elf) {
    ctx.add(make_finding("ENTRYPOINT_NOT_EXECUTABLE", path + " is not an ELF program (a #! script?): give --target as "
                                                             "the interpreter it runs"));
    return;
  }
  // The interpreter as the command (or --target) names it decides a venv.
  std::string invoked = ctx.target_path.empty() ? ctx.invoked : ctx.target_invoked;
  // The user's site-packages: HOME from the image's Env, else, as the
  // engines set it, the user's home in /etc/passwd.
  std::string home = ctx.cfg.env_value("HOME");
  if (home.empty() && ctx.user_ok) home = passwd_home(ctx.tree, ctx.ids.uid);
  const std::vector<std::string> no_options;
  bool entry_is_target = ctx.entry && ctx.entry->path == path;
  std::string user_base = python_user_base(entry_is_target ? ctx.interpreter_options : no_options,
                                           ctx.cfg.env_value("PYTHONNOUSERSITE"), ctx.cfg.env_value("PYTHONUSERBASE"),
                                           home);
  res.python = python_facts(ctx.tree, path, invoked.empty() ? path : invoked, *elf);
  MemrayFound found;
  std::vector<Finding> problems = find_memray(ctx.tree, invoked.empty() ? path : invoked, path, *elf,
                                              ctx.cfg.env_value("PYTHONPATH"), &found, user_base);
  for (auto& f : problems) ctx.add(std::move(f));
  check_platform(ctx, path, *elf);
  if (!found.extension.empty()) {
    res.preload = found.extension;
    FileVerdict rep = Checker(ctx.tree, checker_options(ctx, found.extension)).check(path, elf);
    // The extension is imported, not preloaded: it need not define malloc
    // (neither the verdict nor the target's report says it must).
    rep.findings.erase(std::remove_if(rep.findings.begin(), rep.findings.end(),
                                      [](const Finding& f) { return f.code == "PRELOAD_NO_MALLOC"; }),
                       rep.findings.end());
    for (const auto& f : rep.findings) ctx.add(f);
    res.target = std::move(rep);
  }
  check_launcher_arch(ctx, path, *elf);
  // The entrypoint's options are the target's when it is the interpreter
  // the entrypoint reaches.
  if (entry_is_target)
    for (auto& f : bootstrap_problems(path, ctx.interpreter_options, ctx.env_script)) ctx.add(std::move(f));
  if (!ctx.launcher) {
    ctx.add(make_finding("MEMRAY_NO_LAUNCHER", "the entrypoint is not memprofile exec, so nothing starts memray's "
                                               "tracker in " + path + ": judged whether memray could track it"));
    return;
  }
  if (ctx.launcher->plan.backend != Backend::Memray)
    ctx.add(make_finding("LAUNCHER_CONFIG", std::string("the entrypoint's memprofile exec starts ") +
                                                to_string(ctx.launcher->plan.backend) + ", not memray (--backend memray)"));
  const std::string missing =
      missing_bootstrap(dirname_of(ctx.launcher->plan.cfg.ctl_library) + "/python", [&](const std::string& path) {
        auto b = try_resolve(ctx.tree, path);
        return b && b->node.kind == FsNode::Kind::Regular;
      });
  if (!missing.empty())
    ctx.add(make_finding("MEMRAY_BOOTSTRAP_MISSING", "memprofile's bootstrap " + missing + " is not in the image"));
}

// Verdicts of the dispatched programs, against the same preload library in
// the same loader environment as the target's.
void judge_dispatched(Context& ctx) {
  PreflightResult& res = ctx.res;
  if (res.dispatch.empty()) return;
  Checker checker(ctx.tree, checker_options(ctx, res.preload));
  std::string names;
  for (auto& d : res.dispatch) {
    try {
      d.profilable = checker.check(d.path, ctx.tree.elf(d.path)).profilable();
    } catch (const Error&) {
      d.profilable = false;
    }
    names += (names.empty() ? "" : ", ") + d.path + (d.profilable ? " (profilable)" : " (not profilable)");
  }
  ctx.add(make_finding("DISPATCHER", res.program + " names other programs of the image and may exec them: " + names +
                                         (ctx.target_path.empty() ? "; judging " + res.program + " itself" : "")));
}

// bytehound drops LD_PRELOAD in the first process it loads into. Without
// --target, the programs the dispatcher execs are the ones lost.
void check_child_tracking(Context& ctx) {
  std::string lost;
  if (ctx.target && ctx.entry && ctx.target->path != ctx.entry->path) {
    lost = ctx.target->path;
  } else if (ctx.target_path.empty()) {
    for (const auto& d : ctx.res.dispatch) lost += (lost.empty() ? "" : ", ") + d.path;
  }
  if (ctx.res.backend != "bytehound" || !ctx.entry_elf || ctx.entry_elf->linkage != Linkage::Dynamic || lost.empty())
    return;
  std::string track = ctx.cfg.env_value("MEMORY_PROFILER_TRACK_CHILD_PROCESSES");
  // The launcher sets it whenever its target is not the program it starts.
  bool launcher_tracks = ctx.res.launcher && ctx.target && ctx.target->path != ctx.entry->path;
  if (track != "1" && !launcher_tracks)
    ctx.add(make_finding("BYTEHOUND_CHILD_UNTRACKED",
                         "bytehound loads into the dispatcher " + ctx.entry->path + " first and, with "
                         "MEMORY_PROFILER_TRACK_CHILD_PROCESSES " + (track.empty() ? "unset" : "=" + track) +
                         ", removes LD_PRELOAD there: " + lost + " start(s) unprofiled"));
}

// Where the backend writes the profile: its variable in the image's Env,
// else what the launcher sets, else the backend's default ("" for none).
std::string profile_output(const Context& ctx) {
  const PreflightResult& res = ctx.res;
  // A variable set in the image wins over the launcher's, as at run time.
  bool launched = res.launcher.has_value();
  std::string out;
  if (res.backend == "bytehound") {
    out = ctx.cfg.env_value("MEMORY_PROFILER_OUTPUT");
    if (out.empty()) out = launched ? res.launcher->output_dir + "/x" : "memory-profiling_%e_%t_%p.dat";
  } else if (res.backend == "jemalloc") {
    bool set = false;
    std::string conf = ctx.cfg.env_value("MALLOC_CONF", &set);
    for (const auto& kv : split(conf, ","))
      if (kv.rfind("prof_prefix:", 0) == 0) out = kv.substr(12);
    if (out.empty()) out = launched && !set ? res.launcher->output_dir + "/jeprof" : "jeprof";
  } else if (res.backend == "heaptrack") {
    out = ctx.cfg.env_value("DUMP_HEAPTRACK_OUTPUT");
    if (out.empty() && launched) out = res.launcher->output_dir + "/heaptrack";
  } else if (res.backend == "memray" && launched) {
    out = res.launcher->output_dir + "/memray.bin";  // the bootstrap's, one capture per process
  }
  return out;
}

// The users the program's own configuration makes its processes (nginx's
// `user`), as exec checks them (tree_users.h): one who cannot write the
// directory gets, under memprofile exec's control library, a subdirectory
// per process, made while the process is still root (ctl/users.c); without
// it (LD_PRELOAD in Env, or memray's bootstrap) its snapshots would fail.
void check_program_users(Context& ctx, const std::string& dir, const FsNode& n) {
  if (!ctx.target) return;
  const std::vector<std::string>& argv = ctx.launcher ? ctx.launcher->plan.argv : ctx.res.argv;
  struct stat st {};
  st.st_uid = n.uid;
  st.st_gid = n.gid;
  st.st_mode = S_IFDIR | (n.mode & 07777);
  for (const auto& u : program_users(ctx.tree, ctx.target->path, argv, ctx.ids.uid)) {
    if (can_write_dir(st, u.ids)) continue;
    std::string who = "uid " + std::to_string(u.ids.uid) + " (" + u.name + ", " + u.from + ")";
    if (ctx.launcher && !ctx.memray)
      ctx.add(make_finding("OUTPUT_DIR_PER_PROCESS",
                           dir + " is not writable by " + who + ": each process that becomes that user will write to "
                           "a subdirectory of its own, " + dir + "/proc.PID, which the control library makes for it "
                           "while it is still root"));
    else
      ctx.add(make_finding("OUTPUT_DIR_NOT_WRITABLE",
                           dir + " is not writable by " + who + ", as which its processes will run: their snapshots "
                           "would fail" + (ctx.launcher ? std::string(" (memray's bootstrap makes no subdirectories)")
                                                        : std::string(" (only memprofile exec's control library gives "
                                                                      "each a subdirectory of its own)")),
                           "chmod 1777 " + dir + " in the image, or point the profile at a directory every user of "
                           "the tree can write"));
    return;
  }
}

// Where the profile goes, and whether the image's user can write there.
void check_output_dir(Context& ctx) {
  const PreflightResult& res = ctx.res;
  if (res.preload.empty() || res.backend == "unknown") return;
  std::string out = profile_output(ctx);
  if (out.empty()) return;
  std::string dir = dirname_of(out[0] == '/' ? out : normalize_path(ctx.cwd + "/" + out));
  auto r = try_resolve(ctx.tree, dir);
  if (!r || r->node.kind != FsNode::Kind::Directory) {
    ctx.add(make_finding("OUTPUT_DIR_MISSING", "the " + res.backend + " profile goes to " + dir +
                                                   ", which does not exist in the image: nothing is recorded (the "
                                                   "profiler only logs the failure)"));
    return;
  }
  if (!ctx.user_ok) return;
  const FsNode& n = r->node;
  const UserIds& ids = ctx.ids;
  bool in_group = n.gid == ids.gid || std::count(ids.groups.begin(), ids.groups.end(), n.gid);
  uint32_t bits = ids.uid == 0 ? 07 : n.uid == ids.uid ? (n.mode >> 6) & 7 : in_group ? (n.mode >> 3) & 7 : n.mode & 7;
  if ((bits & 3) == 3) {
    check_program_users(ctx, dir, n);
    return;
  }
  char mode[8];
  snprintf(mode, sizeof mode, "%04o", n.mode & 07777);
  ctx.add(make_finding("OUTPUT_DIR_NOT_WRITABLE", dir + " is not writable by the image's user " +
                                                      (ctx.cfg.user.empty() ? "root" : ctx.cfg.user) + " (uid " +
                                                      std::to_string(ids.uid) + "; directory " + std::to_string(n.uid) +
                                                      ":" + std::to_string(n.gid) + " mode " + mode + ")"));
}

}  // namespace

PreflightResult preflight(const LoadedImage& image, const PreflightOptions& opts) {
  Context ctx(image, opts);
  resolve_launcher(ctx);
  follow_entrypoint(ctx);
  find_dispatch_targets(ctx);
  pick_target(ctx);
  pick_preload(ctx);
  resolve_run_user(ctx);
  judge_target(ctx);
  judge_memray(ctx);
  judge_dispatched(ctx);
  check_child_tracking(ctx);
  check_output_dir(ctx);
  sort_by_fix_order(ctx.res.findings);
  return std::move(ctx.res);
}

}  // namespace memprofile
