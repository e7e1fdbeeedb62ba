// `memprofile attached [PID]`: is the profiler really in the process, and is
// it recording? Replaces the numaflow guide's three manual commands (grep
// /proc/1/maps, ldd, ls -la on the output directory).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <dirent.h>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <thread>

#include "json_text.h"
#include "cmd_launcher.h"
#include "elf_info.h"
#include "error.h"
#include "profiler.h"

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

std::map<std::string, uint64_t> profile_sizes(Backend b, const std::string& dir) {
  std::map<std::string, uint64_t> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (!is_profile_file(b, name)) continue;
    struct stat st;
    if (stat((dir + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) out[name] = static_cast<uint64_t>(st.st_size);
  }
  closedir(d);
  return out;
}

int run_attached(const AttachedOptions& o) {
  LauncherConfig cfg;
  load_launcher_config(o.config, cfg);
  apply_env_overrides(cfg);
  if (!o.backend.empty()) cfg.backend = o.backend;
  if (!o.preload.empty()) cfg.preload = o.preload;
  if (!o.output_dir.empty()) cfg.output_dir = o.output_dir;
  Backend backend = parse_backend(cfg.backend);
  std::string preload = cfg.preload.empty() ? default_preload(backend) : cfg.preload;
  std::string proc = "/proc/" + std::to_string(o.pid);

  std::ifstream maps(proc + "/maps");
  if (!maps) throw FileError(proc + "/maps", "cannot read (no such process, or no permission)");
  std::string mapped_as;
  std::string base = preload.substr(preload.rfind('/') + 1);
  for (std::string line; std::getline(maps, line);) {
    size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
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
  int fd = open((proc + "/exe").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    try {
      linkage = to_string(read_elf_fd(fd, proc + "/exe").linkage);
    } catch (const Error&) {
    }
    close(fd);
  }

  auto before = profile_sizes(backend, cfg.output_dir);
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(o.window * 1000)));
  auto after = profile_sizes(backend, cfg.output_dir);
  json files = json::array();
  bool growing = false;
  for (const auto& [name, size] : after) {
    uint64_t was = before.count(name) ? before[name] : 0;
    growing = growing || size > was;
    files.push_back({{"path", cfg.output_dir + "/" + name}, {"size", size}, {"grew", size - std::min(size, was)}});
  }
  bool attached = !mapped_as.empty() && linkage != "static" && linkage != "static-pie";

  if (o.json) {
    std::cout << json_text(json{{"pid", o.pid},
                      {"exe", exe_path},
                      {"linkage", linkage},
                      {"backend", to_string(backend)},
                      {"mapped", !mapped_as.empty()},
                      {"library", mapped_as.empty() ? json(nullptr) : json(mapped_as)},
                      {"profiles", files},
                      {"growing", growing},
                      {"window_seconds", o.window},
                      {"attached", attached}})
              << "\n";
  } else {
    std::cout << "pid " << o.pid << " (" << exe_path << ", " << linkage << ")\n";
    std::cout << "  " << to_string(backend) << " library mapped: "
              << (mapped_as.empty() ? "no (not in " + proc + "/maps)" : "yes (" + mapped_as + ")") << "\n";
    if (files.empty()) std::cout << "  profile: none yet in " << cfg.output_dir << "\n";
    for (const auto& f : files)
      std::cout << "  profile: " << f["path"].get<std::string>() << " " << f["size"].get<uint64_t>() << " bytes, "
                << (f["grew"].get<uint64_t>() ? "growing (+" + std::to_string(f["grew"].get<uint64_t>()) + " in the window)"
                                              : std::string("not growing in the window")) << "\n";
    if (backend == Backend::Bytehound && attached && !growing)
      std::cout << "  note: bytehound flushes about every 30 s; a quiet window is normal\n";
    std::cout << (attached ? "ATTACHED" : "NOT ATTACHED") << "\n";
  }
  return attached ? kExitOk : kExitNotProfilable;
}

}  // namespace

void setup_attached(CLI::App& app, int& exit_code) {
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
