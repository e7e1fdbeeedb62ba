#include "runtime/attach.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/error.h"
#include "base/unique_fd.h"
#include "elf/elf_info.h"
#include "runtime/control_client.h"
#include "runtime/launcher.h"

namespace memprofile {

using nlohmann::json;

namespace {

// The process's own profile files (pid < 0: every process's): in a
// directory a whole tree shares, its children's (and an earlier process's
// of another pid) are theirs.
// A process that became a user who cannot write the directory writes in its
// own subdirectory, proc.PID (ctl.h): its files are named with that in front.
std::map<std::string, uint64_t> profile_sizes(Backend b, const std::string& dir, long pid, bool subdirs_too = true) {
  std::map<std::string, uint64_t> out;
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
  if (!d) return out;
  std::vector<std::string> subdirs;
  while (struct dirent* e = readdir(d.get())) {
    std::string name = e->d_name;
    if (subdirs_too && name.rfind("proc.", 0) == 0 && name.size() <= 15 && name.find_first_not_of("0123456789", 5) == std::string::npos &&
        (pid < 0 || name == "proc." + std::to_string(pid)))
      subdirs.push_back(name);
    if (!is_profile_file(b, name) || (pid >= 0 && profile_file_pid(b, name) != pid)) continue;
    struct stat st;
    if (stat((dir + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) out[name] = static_cast<uint64_t>(st.st_size);
  }
  for (const auto& sub : subdirs)
    for (const auto& [name, size] : profile_sizes(b, dir + "/" + sub, pid, false)) out[sub + "/" + name] = size;
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

// The settings this command was given, with where each came from:
// flags, then this command's MEMPROFILE_* variables, then the config file.
LauncherConfig told_settings(const AttachRequest& o, Sources& from) {
  LauncherConfig told;
  told.backend.clear();
  told.output_dir.clear();
  load_launcher_config(o.config, told);
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
  return told;
}

// What the process is: its mappings' paths and its environment as exec'd.
struct ProcessView {
  std::string proc;
  std::vector<std::string> mapped;
  std::map<std::string, std::string> env;
  std::string get(const char* k) const {
    auto it = env.find(k);
    return it == env.end() ? std::string() : it->second;
  }
};

ProcessView view_process(int pid) {
  ProcessView v;
  v.proc = "/proc/" + std::to_string(pid);
  std::ifstream maps(v.proc + "/maps");
  if (!maps) throw FileError(v.proc + "/maps", "cannot read (no such process, or no permission)");
  for (std::string line; std::getline(maps, line);) {
    size_t slash = line.find('/');
    if (slash != std::string::npos) v.mapped.push_back(line.substr(slash));
  }
  v.env = process_environ(v.proc);
  return v;
}

// The backend: as told, else the process's MEMPROFILE_BACKEND, else the
// first whose library is mapped or preloaded, else the default.
Backend find_backend(const LauncherConfig& told, const ProcessView& p, Sources& from) {
  std::string name = told.backend;
  if (name.empty() && !p.get("MEMPROFILE_BACKEND").empty()) {
    name = p.get("MEMPROFILE_BACKEND");
    from.backend = p.proc + "/environ";
  }
  // What memprofile exec told the control library (none among them).
  if (name.empty() && !p.get("MEMPROFILE_CTL_BACKEND").empty()) {
    name = p.get("MEMPROFILE_CTL_BACKEND");
    from.backend = p.proc + "/environ";
  }
  if (name.empty())
    for (int rank = 1; rank <= static_cast<int>(backend_rows().size()); ++rank)
      for (const BackendRow& row : backend_rows()) {
        if (row.found_by_library != rank) continue;
        for (const char* m : row.markers) {
          bool in_preload = p.get("LD_PRELOAD").find(m) != std::string::npos;
          bool in_maps = std::any_of(p.mapped.begin(), p.mapped.end(),
                                     [&](const std::string& x) { return x.find(m) != std::string::npos; });
          if (name.empty() && (in_maps || in_preload)) {
            name = row.name;
            from.backend = p.proc + (in_maps ? "/maps" : "/environ");
          }
        }
      }
  if (name.empty()) name = LauncherConfig{}.backend;
  return parse_backend(name);
}

// The output directory: as told, else what the launcher told the backend,
// as the process received it, else the default.
std::string find_output_dir(const LauncherConfig& told, Backend backend, const ProcessView& p, Sources& from) {
  if (!told.output_dir.empty()) return told.output_dir;
  std::string dir = p.get("MEMPROFILE_OUTPUT_DIR");
  if (dir.empty()) {
    // The variable its row names: jemalloc's is MALLOC_CONF's prof_prefix
    // (or, for a program's own jemalloc, what exec told the control library).
    const BackendRow& row = backend_row(backend);
    if (backend == Backend::Jemalloc) {
      std::string conf = p.get("MALLOC_CONF");
      if (conf.empty()) conf = p.get("MEMPROFILE_CTL_DIR").empty() ? "" : "prof_prefix:" + p.get("MEMPROFILE_CTL_DIR") + "/jeprof";
      size_t at = conf.find("prof_prefix:");
      if (at != std::string::npos) dir = dir_of_setting(conf.substr(at + 12, conf.find(',', at) - at - 12));
    } else if (row.output_variable) {
      dir = row.output_names_file ? dir_of_setting(p.get(row.output_variable)) : p.get(row.output_variable);
    }
  }
  if (dir.empty()) return LauncherConfig{}.output_dir;
  // A relative setting is the process's: take it from its cwd.
  if (dir[0] != '/') {
    char cwd[4096];
    ssize_t n = readlink((p.proc + "/cwd").c_str(), cwd, sizeof cwd - 1);
    if (n > 0) dir = std::string(cwd, static_cast<size_t>(n)) + "/" + dir;
  }
  from.output_dir = p.proc + "/environ";
  return dir;
}

// The backend's library among the mappings, by path, name or marker.
std::string mapped_library(const std::string& preload, Backend backend, const ProcessView& p) {
  std::string base = preload.substr(preload.rfind('/') + 1);
  for (const auto& path : p.mapped) {
    bool hit = path == preload || path.substr(path.rfind('/') + 1) == base;
    for (const auto& m : library_markers(backend)) hit = hit || path.find(m) != std::string::npos;
    if (hit) return path;
  }
  return "";
}

// The program and how it is linked ("unknown" when it cannot be read).
void read_program(const ProcessView& p, Attachment& a) {
  char exe[4096];
  ssize_t n = readlink((p.proc + "/exe").c_str(), exe, sizeof exe - 1);
  a.exe = n > 0 ? std::string(exe, static_cast<size_t>(n)) : "?";
  a.linkage = "unknown";
  if (UniqueFd fd(open((p.proc + "/exe").c_str(), O_RDONLY | O_CLOEXEC)); fd) {
    try {
      a.linkage = to_string(read_elf_fd(fd.get(), p.proc + "/exe").linkage);
    } catch (const Error&) {
    }
  }
}

// The process's own profiles, watched for the window. One pass after it
// serves every process's files (what collect would carry) too.
void watch_profiles(const AttachRequest& o, Attachment& a) {
  auto before = profile_sizes(a.backend, a.output_dir, o.pid);
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(o.window * 1000)));
  for (const auto& [name, size] : profile_sizes(a.backend, a.output_dir, -1)) {
    a.output_dir_bytes += size;
    if (profile_file_pid(a.backend, name.substr(name.rfind('/') + 1)) != o.pid) continue;
    uint64_t was = before.count(name) ? before[name] : 0;
    a.growing = a.growing || size > was;
    a.profiles.push_back({a.output_dir + "/" + name, size, size - std::min(size, was)});
  }
}

// Whether it records: the control library says so, when it is there (a
// dormant process is attached and records nothing until memprofile start).
void ask_recording(Attachment& a) {
  std::string sock = a.output_dir + "/" + ctl_socket_name(a.pid);
  // Whatever has the socket's name is asked, and refused with a reason
  // when it is not the process's (a link, another owner, another pid).
  struct stat st;
  if (lstat(sock.c_str(), &st) != 0) return;
  // A cap, not a wait: the answer takes milliseconds, later on a busy node.
  try {
    json r = ask_control(sock, a.pid, "status", 10.0);
    a.recording = r.value("recording", false);
    a.stopped_reason = r.value("stopped_reason", std::string());
  } catch (const Error& e) {
    a.control_error = e.what();
  }
}

}  // namespace

Attachment check_attached(const AttachRequest& o) {
  Sources from;
  LauncherConfig told = told_settings(o, from);
  ProcessView p = view_process(o.pid);
  Attachment a;
  a.pid = o.pid;
  a.window = o.window;
  a.backend = find_backend(told, p, from);
  a.output_dir = find_output_dir(told, a.backend, p, from);
  a.backend_from = from.backend;
  a.output_dir_from = from.output_dir;
  a.library = mapped_library(told.preload.empty() ? default_preload(a.backend) : told.preload, a.backend, p);
  read_program(p, a);
  // memprofile exec drives a program's own jemalloc (MEMPROFILE_CTL_MALLCTL
  // names its mallctl): the library that records is the program itself.
  // gperftools' heap profiler is always the program's own.
  if (a.library.empty() && ((a.backend == Backend::Jemalloc && p.env.count("MEMPROFILE_CTL_MALLCTL")) ||
                            a.backend == Backend::Tcmalloc))
    a.library = a.exe;
  watch_profiles(o, a);
  a.attached = !a.library.empty() && a.linkage != "static" && a.linkage != "static-pie";
  ask_recording(a);
  return a;
}

}  // namespace memprofile
