// `memprofile attached [PID]`: is the profiler really in the process, and is
// it recording? Replaces the numaflow guide's three manual commands (grep
// /proc/1/maps, ldd, ls -la on the output directory).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <thread>

#include "base/json_text.h"
#include "cli/commands.h"
#include "runtime/control_client.h"
#include "elf/elf_info.h"
#include "base/error.h"
#include "base/unique_fd.h"
#include "runtime/backend.h"

namespace memprofile {

using nlohmann::json;

namespace {

struct AttachedOptions {
  int pid = 1;
  std::string config = kDefaultConfigPath;
  std::string backend, preload, output_dir;
  double window = 2.0;
  bool json = false;
};

// The process's own profile files (pid < 0: every process's): in a
// directory a whole tree shares, its children's (and an earlier process's
// of another pid) are theirs.
std::map<std::string, uint64_t> profile_sizes(Backend b, const std::string& dir, long pid) {
  std::map<std::string, uint64_t> out;
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
  if (!d) return out;
  while (struct dirent* e = readdir(d.get())) {
    std::string name = e->d_name;
    if (!is_profile_file(b, name) || (pid >= 0 && profile_file_pid(b, name) != pid)) continue;
    struct stat st;
    if (stat((dir + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) out[name] = static_cast<uint64_t>(st.st_size);
  }
  return out;
}

// The directory of a profile path a backend was told to write to.
std::string dir_of_setting(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? std::string() : path.substr(0, slash);
}

// Where each setting came from, for the report.
struct Sources {
  std::string backend = "default", output_dir = "default";
};

ExitCode run_attached(const AttachedOptions& o) {
  std::string proc = "/proc/" + std::to_string(o.pid);
  // Precedence: flags, this command's MEMPROFILE_* variables, the config
  // file, then the target process itself (its environment as exec'd, then
  // the library mapped into it), then the defaults. A process started with
  // `exec --backend jemalloc` then answers for jemalloc, not bytehound.
  LauncherConfig cfg, told;
  told.backend.clear();
  told.output_dir.clear();
  load_launcher_config(o.config, told);
  Sources from;
  if (!told.backend.empty()) from.backend = "config " + o.config;
  if (!told.output_dir.empty()) from.output_dir = "config " + o.config;
  std::string env_backend = getenv("MEMPROFILE_BACKEND") ? getenv("MEMPROFILE_BACKEND") : "";
  std::string env_dir = getenv("MEMPROFILE_OUTPUT_DIR") ? getenv("MEMPROFILE_OUTPUT_DIR") : "";
  apply_env_overrides(told);
  if (!env_backend.empty()) from.backend = "MEMPROFILE_BACKEND";
  if (!env_dir.empty()) from.output_dir = "MEMPROFILE_OUTPUT_DIR";
  if (!o.backend.empty()) told.backend = o.backend, from.backend = "--backend";
  if (!o.preload.empty()) told.preload = o.preload;
  if (!o.output_dir.empty()) told.output_dir = o.output_dir, from.output_dir = "--output-dir";

  std::ifstream maps(proc + "/maps");
  if (!maps) throw FileError(proc + "/maps", "cannot read (no such process, or no permission)");
  std::vector<std::string> mapped;
  for (std::string line; std::getline(maps, line);) {
    size_t slash = line.find('/');
    if (slash != std::string::npos) mapped.push_back(line.substr(slash));
  }
  auto penv = process_environ(proc);
  auto pget = [&](const char* k) {
    auto it = penv.find(k);
    return it == penv.end() ? std::string() : it->second;
  };

  cfg.backend = told.backend;
  if (cfg.backend.empty() && !pget("MEMPROFILE_BACKEND").empty()) {
    cfg.backend = pget("MEMPROFILE_BACKEND");
    from.backend = proc + "/environ";
  }
  if (cfg.backend.empty())
    for (Backend b : {Backend::Jemalloc, Backend::Heaptrack, Backend::Bytehound}) {
      for (const auto& m : library_markers(b)) {
        bool in_preload = pget("LD_PRELOAD").find(m) != std::string::npos;
        bool in_maps = std::any_of(mapped.begin(), mapped.end(), [&](const std::string& p) { return p.find(m) != std::string::npos; });
        if (cfg.backend.empty() && (in_maps || in_preload)) {
          cfg.backend = to_string(b);
          from.backend = proc + (in_maps ? "/maps" : "/environ");
        }
      }
    }
  if (cfg.backend.empty()) cfg.backend = LauncherConfig{}.backend;
  Backend backend = parse_backend(cfg.backend);

  cfg.output_dir = told.output_dir;
  if (cfg.output_dir.empty()) {
    // What the launcher told the backend, as the process received it.
    std::string dir = pget("MEMPROFILE_OUTPUT_DIR");
    if (dir.empty()) {
      switch (backend) {
        case Backend::Jemalloc: {
          std::string conf = pget("MALLOC_CONF");
          size_t at = conf.find("prof_prefix:");
          if (at != std::string::npos) dir = dir_of_setting(conf.substr(at + 12, conf.find(',', at) - at - 12));
          break;
        }
        case Backend::Bytehound: dir = dir_of_setting(pget("MEMORY_PROFILER_OUTPUT")); break;
        case Backend::Heaptrack: dir = dir_of_setting(pget("DUMP_HEAPTRACK_OUTPUT")); break;
      }
    }
    if (!dir.empty()) {
      // A relative setting is the process's: take it from its cwd.
      if (dir[0] != '/') {
        char cwd[4096];
        ssize_t n = readlink((proc + "/cwd").c_str(), cwd, sizeof cwd - 1);
        if (n > 0) dir = std::string(cwd, static_cast<size_t>(n)) + "/" + dir;
      }
      cfg.output_dir = dir;
      from.output_dir = proc + "/environ";
    }
  }
  if (cfg.output_dir.empty()) cfg.output_dir = LauncherConfig{}.output_dir;

  std::string preload = told.preload.empty() ? default_preload(backend) : told.preload;
  std::string mapped_as;
  std::string base = preload.substr(preload.rfind('/') + 1);
  for (const auto& path : mapped) {
    bool hit = path == preload || path.substr(path.rfind('/') + 1) == base;
    for (const auto& m : library_markers(backend)) hit = hit || path.find(m) != std::string::npos;
    if (hit) {
      mapped_as = path;
      break;
    }
  }

  char exe[4096];
  ssize_t n = readlink((proc + "/exe").c_str(), exe, sizeof exe - 1);
  std::string exe_path = n > 0 ? std::string(exe, static_cast<size_t>(n)) : "?";
  std::string linkage = "unknown";
  if (UniqueFd fd(open((proc + "/exe").c_str(), O_RDONLY | O_CLOEXEC)); fd) {
    try {
      linkage = to_string(read_elf_fd(fd.get(), proc + "/exe").linkage);
    } catch (const Error&) {
    }
  }

  auto before = profile_sizes(backend, cfg.output_dir, o.pid);
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(o.window * 1000)));
  // One pass after the window: every process's files (what collect would
  // carry), of which this process's own are listed.
  uint64_t dir_bytes = 0;
  json files = json::array();
  bool growing = false;
  for (const auto& [name, size] : profile_sizes(backend, cfg.output_dir, -1)) {
    dir_bytes += size;
    if (profile_file_pid(backend, name) != o.pid) continue;
    uint64_t was = before.count(name) ? before[name] : 0;
    growing = growing || size > was;
    files.push_back({{"path", cfg.output_dir + "/" + name}, {"size", size}, {"grew", size - std::min(size, was)}});
  }
  bool attached = !mapped_as.empty() && linkage != "static" && linkage != "static-pie";
  // Whether it records: the control library says so, when it is there (a
  // dormant process is attached and records nothing until memprofile start).
  json recording = nullptr, stopped = "";
  std::string sock = cfg.output_dir + "/" + ctl_socket_name(o.pid);
  if (struct stat st; stat(sock.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    try {
      json r = ask_control(sock, "status", 2.0);
      recording = r.value("recording", false);
      stopped = r.value("stopped_reason", std::string());
    } catch (const Error&) {
    }
  }

  if (o.json) {
    std::cout << json_text(json{{"pid", o.pid},
                      {"exe", exe_path},
                      {"linkage", linkage},
                      {"backend", to_string(backend)},
                      {"backend_from", from.backend},
                      {"output_dir", cfg.output_dir},
                      {"output_dir_from", from.output_dir},
                      {"mapped", !mapped_as.empty()},
                      {"library", mapped_as.empty() ? json(nullptr) : json(mapped_as)},
                      {"profiles", files},
                      {"output_dir_bytes", dir_bytes},
                      {"growing", growing},
                      {"recording", recording},
                      {"stopped_reason", stopped},
                      {"window_seconds", o.window},
                      {"attached", attached}})
              << "\n";
  } else {
    std::cout << "pid " << o.pid << " (" << exe_path << ", " << linkage << ")\n";
    std::cout << "  backend " << to_string(backend) << " (from " << from.backend << "), profiles in " << cfg.output_dir
              << " (from " << from.output_dir << ")\n";
    std::cout << "  " << to_string(backend) << " library mapped: "
              << (mapped_as.empty() ? "no (not in " + proc + "/maps)" : "yes (" + mapped_as + ")") << "\n";
    if (files.empty()) std::cout << "  profile: none yet in " << cfg.output_dir << "\n";
    for (const auto& f : files)
      std::cout << "  profile: " << f["path"].get<std::string>() << " " << f["size"].get<uint64_t>() << " bytes, "
                << (f["grew"].get<uint64_t>() ? "growing (+" + std::to_string(f["grew"].get<uint64_t>()) + " in the window)"
                                              : std::string("not growing in the window")) << "\n";
    if (recording.is_boolean())
      std::cout << "  recording: "
                << (recording.get<bool>() ? std::string("on")
                    : stopped.get<std::string>().empty()
                        ? std::string("off (dormant or stopped: memprofile start turns it on)")
                        : "off (stopped: " + stopped.get<std::string>() + ")")
                << "\n";
    if (backend == Backend::Bytehound && attached && !growing)
      std::cout << "  note: bytehound flushes about every 30 s; a quiet window is normal\n";
    std::cout << (attached ? "ATTACHED" : "NOT ATTACHED") << "\n";
  }
  return attached ? ExitCode::Ok : ExitCode::NotProfilable;
}

}  // namespace

void setup_attached(CLI::App& app, ExitCode& exit_code) {
  auto o = std::make_shared<AttachedOptions>();
  CLI::App* cmd = app.add_subcommand("attached", "Say whether the profiler is loaded in a process and recording");
  cmd->add_option("pid", o->pid, "process to inspect (default 1, the container's entrypoint)");
  cmd->add_option("--config", o->config, "launcher config file")->capture_default_str();
  cmd->add_option("--backend", o->backend, "bytehound, jemalloc or heaptrack");
  cmd->add_option("--preload", o->preload, "the preload library's path");
  cmd->add_option("--output-dir", o->output_dir, "where the profiles are written");
  cmd->add_option("--window", o->window, "seconds to watch the profile grow")->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->callback([o, &exit_code] { exit_code = run_attached(*o); });
}

}  // namespace memprofile
