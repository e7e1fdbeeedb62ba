#include "verdict/preflight.h"

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "base/error.h"
#include "image/image_tree.h"
#include "image/layer.h"
#include "verdict/profiler.h"

namespace memprofile {

namespace {

const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr int kMaxScripts = 4;
constexpr size_t kMaxDispatchCandidates = 20000;

// What to fix first: the base image, then the program, then the preload
// library, then how it is wired, then where the profile goes.
int priority(const std::string& code) {
  static const std::vector<std::string> order = {
      "NO_ENTRYPOINT", "LAUNCHER_WRONG_ARCH", "LAUNCHER_CONFIG", "ENTRYPOINT_MISSING", "ENTRYPOINT_NOT_EXECUTABLE", "TARGET_NOT_FOUND", "INTERPRETER_MISSING",
      "LIBC_MISSING", "STATIC_BINARY", "STATIC_PIE", "MUSL_LIBC", "NOT_A_PROGRAM", "NEEDED_MISSING", "GLIBC_TOO_OLD",
      "VERSION_MISSING", "USER_UNKNOWN", "PRELOAD_NOT_FOUND", "PRELOAD_NOT_ELF", "PRELOAD_NOT_SHARED",
      "PRELOAD_WRONG_ARCH", "PRELOAD_NEEDED_MISSING", "PRELOAD_GLIBC_TOO_NEW", "PRELOAD_NO_MALLOC", "SETUID_AS_USER",
      "BYTEHOUND_CHILD_UNTRACKED", "OUTPUT_DIR_MISSING", "OUTPUT_DIR_NOT_WRITABLE"};
  auto it = std::find(order.begin(), order.end(), code);
  return it == order.end() ? static_cast<int>(order.size()) : static_cast<int>(it - order.begin());
}

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

// How the loader will look for the preload library in the image: a path
// (relative ones from the working directory) or, with no '/', a name
// searched like a needed library.
CheckerOptions preload_checker_options(const std::string& preload, const std::string& cwd, const ImageConfig& cfg) {
  CheckerOptions co;
  co.use_root = true;
  if (!preload.empty())
    co.preload = preload[0] == '/' || preload.find('/') == std::string::npos ? preload : normalize_path(cwd + "/" + preload);
  co.ld_library_path = cfg.env_value("LD_LIBRARY_PATH");
  return co;
}

bool is_executable_file(const std::optional<Resolved>& r) {
  return r && r->node.kind == FsNode::Kind::Regular && (r->node.mode & 0111);
}

std::optional<Resolved> try_resolve(const FileTree& tree, const std::string& path, const std::string& cwd = "/") {
  try {
    return resolve(tree, path, true, cwd);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// execvp's search: a name with '/' is a path (relative to the working
// directory), otherwise each PATH entry in turn.
std::optional<Resolved> lookup_program(const FileTree& tree, const std::string& name, const std::string& path_env,
                                       const std::string& cwd) {
  if (name.find('/') != std::string::npos) return try_resolve(tree, name, cwd);
  for (const auto& dir : split(path_env, ":")) {
    auto r = try_resolve(tree, dir + "/" + name, cwd);
    if (is_executable_file(r)) return r;
  }
  return std::nullopt;
}

// `memprofile exec [options] [--] COMMAND` as the entrypoint: what the
// launcher will run and with which settings, read as run_exec reads them.
struct LauncherUse {
  std::string path;
  LauncherConfig cfg;
  std::vector<std::string> argv;
  std::string error;
};

std::optional<LauncherUse> launcher_of(const FileTree& tree, const ImageConfig& image, const std::vector<std::string>& argv,
                                       const std::string& path_env, const std::string& cwd) {
  // memprofile's global options may come before the subcommand
  // (`memprofile -v exec ...`), as main() parses them.
  size_t sub = 1;
  while (sub < argv.size() && (argv[sub] == "-v" || argv[sub] == "--verbose" || argv[sub] == "-vv")) ++sub;
  if (sub >= argv.size() || argv[sub] != "exec") return std::nullopt;
  auto r = lookup_program(tree, argv[0], path_env, cwd);
  if (!is_executable_file(r)) return std::nullopt;
  std::string base = r->path.substr(r->path.rfind('/') + 1);
  if (base != "memprofile" && base != "memprofile-static") return std::nullopt;
  LauncherUse use;
  use.path = r->path;
  std::string config = kDefaultConfigPath, backend, preload, output_dir, target, ignored;
  bool from_config = false;
  size_t i = sub + 1;
  for (; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-') break;  // the command, given without "--"
    auto value = [&](const std::string& name, std::string* out) {
      if (a == name && i + 1 < argv.size()) {
        *out = argv[++i];
        return true;
      }
      if (a.rfind(name + "=", 0) == 0) {
        *out = a.substr(name.size() + 1);
        return true;
      }
      return false;
    };
    if (value("--config", &config) || value("--backend", &backend) || value("--preload", &preload) ||
        value("--output-dir", &output_dir) || value("--target", &target) || value("--min-free-mb", &ignored) ||
        value("--log-format", &ignored) || a == "--strict")
      continue;
    if (a == "--from-config") {
      from_config = true;
      continue;
    }
    use.error = "the entrypoint passes memprofile exec an option it does not know: " + a;
  }
  std::vector<std::string> rest(argv.begin() + static_cast<std::ptrdiff_t>(std::min(i, argv.size())), argv.end());
  try {
    std::string cfg_path = config[0] == '/' ? config : normalize_path(cwd + "/" + config);
    if (auto text = tree.read(cfg_path, 64 * 1024)) parse_launcher_config(*text, cfg_path, use.cfg);
    // The image's ENV reaches the launcher as its process environment.
    apply_env_overrides(use.cfg, [&](const char* name) { return image.env_value(name); });
    if (!backend.empty()) use.cfg.backend = backend;
    parse_backend(use.cfg.backend);
  } catch (const Error& e) {
    if (use.error.empty()) use.error = e.what();
  }
  if (!preload.empty()) use.cfg.preload = preload;
  if (!output_dir.empty()) use.cfg.output_dir = output_dir;
  if (!target.empty()) use.cfg.target = target;
  use.argv = from_config ? config_command(use.cfg, rest) : rest;
  if (use.argv.empty() && use.error.empty())
    use.error = from_config ? config + " has no entrypoint or cmd for memprofile exec --from-config"
                            : "memprofile exec is the entrypoint but is given no command";
  return use;
}

std::shared_ptr<const std::string> strings_of(const FileTree& tree, const std::string& path) {
  if (auto* image = dynamic_cast<const ImageTree*>(&tree)) return image->path_strings(path);
  if (auto* host = dynamic_cast<const HostTree*>(&tree)) {
    int fd = host->open_file(path);
    if (fd < 0) return nullptr;
    FdReader r(fd, path);
    auto s = scan_path_strings(r);
    ::close(fd);
    return s;
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
  if (base.find("bytehound") != std::string::npos) return "bytehound";
  if (base.find("jemalloc") != std::string::npos) return "jemalloc";
  if (base.find("heaptrack") != std::string::npos) return "heaptrack";
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

PreflightResult preflight(const LoadedImage& image, const PreflightOptions& opts) {
  PreflightResult res;
  const FileTree& tree = *image.tree;
  const ImageConfig& cfg = image.config;
  auto add = [&](Finding f) { res.findings.push_back(std::move(f)); };
  bool path_set = false;
  std::string path_env = cfg.env_value("PATH", &path_set);
  if (!path_set) path_env = kDefaultPath;
  std::string cwd = cfg.working_dir.empty() ? "/" : cfg.working_dir;

  res.argv = cfg.entrypoint;
  res.argv.insert(res.argv.end(), cfg.cmd.begin(), cfg.cmd.end());

  // 0. memprofile exec as the entrypoint: the launcher is static and sets
  // LD_PRELOAD for its command only, so that command is what is judged.
  auto launcher = launcher_of(tree, cfg, res.argv, path_env, cwd);
  std::string target_path = opts.target;
  if (launcher) {
    Backend backend = Backend::Bytehound;
    try {
      backend = parse_backend(launcher->cfg.backend);
    } catch (const Error&) {
    }
    res.launcher = LauncherSettings{launcher->path, to_string(backend),
                                    launcher->cfg.preload.empty() ? default_preload(backend) : launcher->cfg.preload,
                                    launcher->cfg.output_dir, launcher->cfg.target};
    if (!launcher->error.empty()) add(make_finding("LAUNCHER_CONFIG", launcher->error));
    std::string cmdline;
    for (const auto& a : launcher->argv) cmdline += (cmdline.empty() ? "" : " ") + a;
    add(make_finding("LAUNCHER", launcher->path + " exec starts `" + cmdline + "` with " + res.launcher->backend + " (" +
                                     res.launcher->preload + "), output in " + res.launcher->output_dir));
    res.argv = launcher->argv;
    if (target_path.empty()) target_path = launcher->cfg.target;
  }

  // 1. The program the container starts, through any #! scripts.
  std::optional<Resolved> entry;
  if (res.argv.empty() || res.argv[0].empty()) {
    if (target_path.empty() && !(launcher && !launcher->error.empty()))
      add(make_finding("NO_ENTRYPOINT", "the image config has neither Entrypoint nor Cmd: nothing to judge"));
  } else {
    std::string name = res.argv[0];
    for (int depth = 0; depth <= kMaxScripts; ++depth) {
      auto r = lookup_program(tree, name, path_env, cwd);
      if (!is_executable_file(r)) {
        add(make_finding("ENTRYPOINT_MISSING", "'" + name + "'" + (depth ? " (the interpreter of " + res.scripts.back() + ")" : "") +
                                                   (name.find('/') == std::string::npos ? " is not found on PATH " + path_env
                                                                                        : " does not exist or is not executable") +
                                                   " in the image"));
        break;
      }
      std::shared_ptr<const ElfInfo> elf;
      try {
        elf = tree.elf(r->path);
      } catch (const Error& e) {
        add(make_finding("ENTRYPOINT_NOT_EXECUTABLE", std::string("cannot read the program: ") + e.what()));
        break;
      }
      if (elf) {
        entry = r;
        break;
      }
      auto head = tree.read(r->path, 256);
      if (!head || head->rfind("#!", 0) != 0) {
        add(make_finding("ENTRYPOINT_NOT_EXECUTABLE", r->path + " is neither an ELF program nor a #! script"));
        break;
      }
      std::string line = head->substr(2, head->find('\n') == std::string::npos ? std::string::npos : head->find('\n') - 2);
      auto words = split(line, " \t\r");
      res.scripts.push_back(r->path);
      if (words.empty()) {
        add(make_finding("ENTRYPOINT_NOT_EXECUTABLE", r->path + " has an empty #! line"));
        break;
      }
      name = words[0];
      if (name.size() >= 4 && name.compare(name.size() - 4, 4, "/env") == 0) {
        // "#!/usr/bin/env [-S] NAME": env searches PATH for NAME.
        auto it = std::find_if(words.begin() + 1, words.end(), [](const std::string& w) { return w[0] != '-'; });
        if (it != words.end()) name = *it;
      }
      if (depth == kMaxScripts) add(make_finding("ENTRYPOINT_NOT_EXECUTABLE", "too many nested #! interpreters"));
    }
  }
  if (!res.scripts.empty() && entry)
    add(make_finding("ENTRYPOINT_SCRIPT", "the entrypoint is a script (" + res.scripts.front() + ") run by " + entry->path +
                                              ": LD_PRELOAD in the environment also loads into the interpreter"));
  if (entry) res.program = entry->path;

  // 2. Dispatchers: other programs in the image whose paths the entrypoint names.
  std::string entry_libc_kind;
  std::shared_ptr<const ElfInfo> entry_elf = entry ? tree.elf(entry->path) : nullptr;
  // Only a program named directly by the config can be a dispatcher: an
  // interpreter names /bin/sh and friends without dispatching to them.
  if (entry && entry_elf && res.scripts.empty()) {
    auto strings = strings_of(tree, entry->path);
    std::set<std::string> seen;
    size_t candidates = 0;
    if (strings) {
      for (const auto& run : split(*strings, "\n")) {
        for (size_t a = 0; a < run.size() && candidates < kMaxDispatchCandidates; ++a) {
          if (run[a] != '/') continue;
          for (size_t b = a + 1; b <= run.size(); ++b) {
            if (b != run.size() && run[b] != '/') continue;
            std::string cand = run.substr(a, b - a);
            if (++candidates > kMaxDispatchCandidates) break;
            if (cand.size() < 3 || seen.count(cand)) continue;
            seen.insert(cand);
            auto r = try_resolve(tree, cand);
            if (!is_executable_file(r) || r->path == entry->path || is_shell(r->path)) continue;
            std::shared_ptr<const ElfInfo> e;
            try {
              e = tree.elf(r->path);
            } catch (const Error&) {
              continue;
            }
            if (!e || !e->is_program()) continue;
            if (std::any_of(res.dispatch.begin(), res.dispatch.end(),
                            [&](const DispatchedProgram& d) { return d.path == r->path; }))
              continue;
            DispatchedProgram d;
            d.path = r->path;
            d.named_as = cand;
            d.linkage = to_string(e->linkage);
            res.dispatch.push_back(d);
          }
        }
      }
    }
  }

  // 3. The process to judge.
  std::optional<Resolved> target = entry;
  if (!target_path.empty()) {
    auto r = lookup_program(tree, target_path, path_env, cwd);
    if (!is_executable_file(r)) {
      add(make_finding("TARGET_NOT_FOUND", "--target " + target_path + " is not an executable file in the image"));
      target.reset();
    } else {
      target = r;
    }
  }

  // 4. The preload library and the environment it runs in.
  bool env_preload_set = false;
  std::string env_preload = cfg.env_value("LD_PRELOAD", &env_preload_set);
  if (env_preload_set && !env_preload.empty())
    add(make_finding("LD_PRELOAD_IN_IMAGE_ENV",
                     "LD_PRELOAD=" + env_preload + " is in the image ENV: it loads into every process of the container, "
                     "including `kubectl exec` shells and the tar behind `kubectl cp` (which crashes under bytehound)"));
  res.preload = opts.preload;
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
    add(make_finding("NO_PRELOAD", "no preload library named (no LD_PRELOAD in the image ENV, no --preload): judged "
                                   "whether one could attach"));
  res.backend = res.preload.empty() ? "" : backend_of(res.preload);
  if (res.launcher && res.preload == res.launcher->preload) res.backend = res.launcher->backend;

  UserIds ids;
  std::string user_error;
  bool user_ok = resolve_user(tree, cfg.user, &ids, &user_error);
  if (!user_ok) add(make_finding("USER_UNKNOWN", user_error));

  // 5. Judge the target against the image.
  if (target) {
    Checker checker(tree, preload_checker_options(res.preload, cwd, cfg));
    std::shared_ptr<const ElfInfo> elf;
    try {
      elf = tree.elf(target->path);
    } catch (const Error& e) {
      add(make_finding("ENTRYPOINT_NOT_EXECUTABLE", std::string("cannot read the target: ") + e.what()));
    }
    if (elf) {
      FileReport rep = checker.check(target->path, elf);
      for (const auto& f : rep.findings) add(f);
      // The kernel sets AT_SECURE when exec changes the effective ids or
      // grants capabilities to a non-root user.
      bool in_group = rep.gid == ids.gid || std::count(ids.groups.begin(), ids.groups.end(), rep.gid);
      bool secure = ((rep.mode & S_ISUID) && rep.uid != ids.uid) || ((rep.mode & S_ISGID) && !in_group) ||
                    (rep.file_caps && ids.uid != 0);
      if (user_ok && secure && (rep.mode & 0111))
        add(make_finding("SETUID_AS_USER", target->path + " is setuid/setgid or has file capabilities and the image runs "
                                           "as user " + (cfg.user.empty() ? std::string("root") : cfg.user) +
                                           ": AT_SECURE is set and glibc ignores LD_PRELOAD entries containing '/'"));
      std::string want_arch = config_arch(machine_name(elf->machine));
      if (!cfg.platform.architecture.empty() && cfg.platform.architecture != want_arch)
        add(make_finding("PLATFORM_MISMATCH", "the image config says " + cfg.platform.architecture + " but " +
                                                  target->path + " is " + machine_name(elf->machine)));
      if (res.launcher) {
        try {
          auto lelf = tree.elf(res.launcher->path);
          if (lelf && lelf->machine != elf->machine)
            add(make_finding("LAUNCHER_WRONG_ARCH", res.launcher->path + " is " + machine_name(lelf->machine) + " but " +
                                                        target->path + " is " + machine_name(elf->machine)));
        } catch (const Error&) {
        }
      }
      res.target = std::move(rep);
    }
  }

  // Verdicts of the dispatched programs, against the same preload.
  if (!res.dispatch.empty()) {
    // The same loader environment as the target's: a dispatched program
    // inherits the image's LD_LIBRARY_PATH too.
    Checker checker(tree, preload_checker_options(res.preload, cwd, cfg));
    std::string names;
    for (auto& d : res.dispatch) {
      try {
        d.profilable = checker.check(d.path, tree.elf(d.path)).profilable();
      } catch (const Error&) {
        d.profilable = false;
      }
      names += (names.empty() ? "" : ", ") + d.path + (d.profilable ? " (profilable)" : " (not profilable)");
    }
    add(make_finding("DISPATCHER", res.program + " names other programs of the image and may exec them: " + names +
                                       (target_path.empty() ? "; judging " + res.program + " itself" : "")));
  }

  // 6. bytehound drops LD_PRELOAD in the first process it loads into.
  // Without --target, the programs the dispatcher execs are the ones lost.
  std::string lost;
  if (target && entry && target->path != entry->path) {
    lost = target->path;
  } else if (target_path.empty()) {
    for (const auto& d : res.dispatch) lost += (lost.empty() ? "" : ", ") + d.path;
  }
  if (res.backend == "bytehound" && entry_elf && entry_elf->linkage == Linkage::Dynamic && !lost.empty()) {
    std::string track = cfg.env_value("MEMORY_PROFILER_TRACK_CHILD_PROCESSES");
    // The launcher sets it whenever its target is not the program it starts.
    bool launcher_tracks = res.launcher && target && target->path != entry->path;
    if (track != "1" && !launcher_tracks)
      add(make_finding("BYTEHOUND_CHILD_UNTRACKED",
                       "bytehound loads into the dispatcher " + entry->path + " first and, with "
                       "MEMORY_PROFILER_TRACK_CHILD_PROCESSES " + (track.empty() ? "unset" : "=" + track) +
                       ", removes LD_PRELOAD there: " + lost + " start(s) unprofiled"));
  }

  // 7. Where the profile goes, and whether the user can write there.
  if (!res.preload.empty() && res.backend != "unknown") {
    std::string out;
    // A variable set in the image wins over the launcher's, as at run time.
    bool launched = res.launcher.has_value();
    if (res.backend == "bytehound") {
      out = cfg.env_value("MEMORY_PROFILER_OUTPUT");
      if (out.empty()) out = launched ? res.launcher->output_dir + "/x" : "memory-profiling_%e_%t_%p.dat";
    } else if (res.backend == "jemalloc") {
      bool set = false;
      std::string conf = cfg.env_value("MALLOC_CONF", &set);
      for (const auto& kv : split(conf, ","))
        if (kv.rfind("prof_prefix:", 0) == 0) out = kv.substr(12);
      if (out.empty()) out = launched && !set ? res.launcher->output_dir + "/jeprof" : "jeprof";
    } else if (res.backend == "heaptrack") {
      out = cfg.env_value("DUMP_HEAPTRACK_OUTPUT");
      if (out.empty() && launched) out = res.launcher->output_dir + "/heaptrack";
    }
    if (!out.empty()) {
      std::string dir = dirname_of(out[0] == '/' ? out : normalize_path(cwd + "/" + out));
      auto r = try_resolve(tree, dir);
      if (!r || r->node.kind != FsNode::Kind::Directory) {
        add(make_finding("OUTPUT_DIR_MISSING", "the " + res.backend + " profile goes to " + dir +
                                                   ", which does not exist in the image: nothing is recorded (the "
                                                   "profiler only logs the failure)"));
      } else if (user_ok) {
        const FsNode& n = r->node;
        bool in_group = n.gid == ids.gid || std::count(ids.groups.begin(), ids.groups.end(), n.gid);
        uint32_t bits = ids.uid == 0 ? 07 : n.uid == ids.uid ? (n.mode >> 6) & 7 : in_group ? (n.mode >> 3) & 7 : n.mode & 7;
        if ((bits & 3) != 3)
          add(make_finding("OUTPUT_DIR_NOT_WRITABLE",
                           dir + " is not writable by the image's user " + (cfg.user.empty() ? "root" : cfg.user) +
                               " (uid " + std::to_string(ids.uid) + "; directory " + std::to_string(n.uid) + ":" +
                               std::to_string(n.gid) + " mode " + [&] {
                                 char b[8];
                                 snprintf(b, sizeof b, "%04o", n.mode & 07777);
                                 return std::string(b);
                               }() + ")"));
      }
    }
  }

  std::stable_sort(res.findings.begin(), res.findings.end(), [](const Finding& a, const Finding& b) {
    int sa = static_cast<int>(a.severity), sb = static_cast<int>(b.severity);
    if (sa != sb) return sa < sb;
    return priority(a.code) < priority(b.code);
  });
  return res;
}

}  // namespace memprofile
