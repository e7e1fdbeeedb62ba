#include "runtime/backend.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_text.h"

namespace memprofile {

const char* to_string(Backend b) {
  switch (b) {
    case Backend::Bytehound: return "bytehound";
    case Backend::Jemalloc: return "jemalloc";
    case Backend::Heaptrack: return "heaptrack";
    case Backend::None: return "none";
    case Backend::Memray: return "memray";
    case Backend::Tcmalloc: return "tcmalloc";
  }
  return "bytehound";
}

Backend parse_backend(const std::string& name) {
  if (name == "bytehound") return Backend::Bytehound;
  if (name == "jemalloc") return Backend::Jemalloc;
  if (name == "heaptrack") return Backend::Heaptrack;
  if (name == "none") return Backend::None;
  if (name == "memray") return Backend::Memray;
  if (name == "tcmalloc") return Backend::Tcmalloc;
  throw Error("unknown backend '" + name +
              "' (bytehound, jemalloc, heaptrack, memray for a Python interpreter, tcmalloc for a program with "
              "gperftools' heap profiler linked in, or none for the control library alone)");
}

std::string default_preload(Backend b) {
  switch (b) {
    case Backend::Bytehound: return "/usr/share/libbytehound.so";  // numaflow's guide's path
    case Backend::Jemalloc: return "/usr/lib/memprofile/libjemalloc.so.2";
    case Backend::Heaptrack: return "/usr/lib/memprofile/libheaptrack_preload.so";
    case Backend::None: return "";
    case Backend::Memray: return "";  // no preload: the bootstrap imports memray
    case Backend::Tcmalloc: return "";  // the profiler is in the program
  }
  return "";
}

std::string dormant_unsupported(Backend b) {
  if (b == Backend::Heaptrack)
    return "heaptrack cannot start dormant: it records from the first allocation, and a trace started later misses "
           "the frees of what was allocated before (use jemalloc or bytehound for dormant mode)";
  if (b == Backend::None) return "--backend none loads no profiler: there is nothing to keep dormant";
  if (b == Backend::Tcmalloc)
    return "gperftools' heap profiler records from the program's start (HEAPPROFILE) and cannot be switched on later";
  return "";
}

std::string settings_unsafe(Backend b, const std::string& output_dir, const std::string& preload,
                            const std::string& ctl_library) {
  auto has = [](const std::string& v, const char* chars) { return v.find_first_of(chars) != std::string::npos; };
  const std::string dir = "the output directory " + output_dir;
  switch (b) {
    case Backend::Jemalloc:
      if (has(output_dir, ",:"))
        return dir + " holds ',' or ':', which jemalloc's MALLOC_CONF reads as the end of its prof_prefix (the rest "
                     "would be settings of its own)";
      break;
    case Backend::Bytehound:
      if (has(output_dir, "%"))
        return dir + " holds '%', which bytehound expands in its output file names (%p, %t, %e, %n)";
      break;
    case Backend::Heaptrack:
      if (output_dir.find("$$") != std::string::npos)
        return dir + " holds \"$$\", which heaptrack replaces with the pid in its output file name";
      break;
    case Backend::None:
    case Backend::Memray:
    case Backend::Tcmalloc: break;
  }
  if (b == Backend::Memray)  // the bootstrap beside the control library goes first on PYTHONPATH
    return has(ctl_library, ":") ? "the control library " + ctl_library +
                                       " holds ':', where Python splits PYTHONPATH (its bootstrap goes there)"
                                 : "";
  for (const std::string* lib : {&preload, &ctl_library})
    if (has(*lib, ": \t\n")) return "the library " + *lib + " holds ':' or a blank, where the loader splits LD_PRELOAD";
  return "";
}

std::string ctl_socket_name(long pid) { return "memprofile-ctl." + std::to_string(pid) + ".sock"; }

std::vector<std::pair<std::string, std::string>> backend_env(Backend b, const std::string& dir, bool dispatcher,
                                                           bool aarch64, bool dormant) {
  switch (b) {
    case Backend::Bytehound: {
      std::vector<std::pair<std::string, std::string>> env = {
          {"MEMORY_PROFILER_OUTPUT", dir + "/memory-profiling_%e_%t_%p.dat"},
          // Drop allocations freed within seconds and skip backtraces on free:
          // a smaller file and less overhead, as numaflow's guide recommends.
          {"MEMORY_PROFILER_CULL_TEMPORARY_ALLOCATIONS", "1"},
          {"MEMORY_PROFILER_GRAB_BACKTRACES_ON_FREE", "0"},
          // bytehound only logs when it cannot open its output: make that visible.
          {"MEMORY_PROFILER_LOG", "info"},
          {"MEMORY_PROFILER_LOGFILE", dir + "/bytehound_%e_%p.log"},
      };
      // Otherwise bytehound unsets LD_PRELOAD in the dispatcher and the real
      // target starts unprofiled.
      if (dispatcher) env.push_back({"MEMORY_PROFILER_TRACK_CHILD_PROCESSES", "1"});
      // Known crashes of the shadow stack on aarch64.
      if (aarch64) env.push_back({"MEMORY_PROFILER_USE_SHADOW_STACK", "0"});
      // Dormant: memprofile start/stop send the SIGUSR1 toggle.
      if (dormant) {
        env.push_back({"MEMORY_PROFILER_DISABLE_BY_DEFAULT", "1"});
        env.push_back({"MEMORY_PROFILER_REGISTER_SIGUSR1", "1"});
      }
      return env;
    }
    case Backend::Jemalloc:
      // Sample about every 512 KiB allocated (jemalloc's default rate, cheap
      // enough for production), dump every 1 GiB allocated and at exit.
      // Dormant: profiling is compiled in and set up, but nothing is sampled
      // until memprofile start sets prof.active.
      return {{"MALLOC_CONF", std::string("prof:true,prof_active:") + (dormant ? "false" : "true") +
                                  ",lg_prof_sample:19,lg_prof_interval:30,prof_final:true,prof_prefix:" + dir +
                                  "/jeprof"}};
    case Backend::Heaptrack:
      return {{"DUMP_HEAPTRACK_OUTPUT", dir + "/heaptrack.$$.raw"}};  // heaptrack replaces $$ with the pid
    case Backend::None: return {};
    case Backend::Memray:
      // Read by memprofile's bootstrap (python/sitecustomize.py); PYTHONPATH
      // and the interpreter it tracks are exec's to set.
      return {{"MEMPROFILE_MEMRAY_DIR", dir}};
    case Backend::Tcmalloc:
      // gperftools names the dumps PREFIX.NNNN.heap, and a child's that
      // execs PREFIX_PID.NNNN.heap; the control library renames them by
      // the pid that writes them (files.c). The prefix is exec's own, so
      // that the profiler's clean-up of PREFIX.*.heap at start removes
      // nothing but what this very launch would have left.
      return {{"HEAPPROFILE", dir + "/tcmalloc-" + std::to_string(getpid())}};
  }
  return {};
}

std::string memray_capture_name(long pid) { return "memray." + std::to_string(pid) + ".bin"; }

bool writes_one_file(Backend b) {
  return b == Backend::Heaptrack || b == Backend::Bytehound;
}

bool is_profile_file(Backend b, const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  auto ends = [&](const char* s) {
    size_t n = std::char_traits<char>::length(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  switch (b) {
    case Backend::Bytehound: return (starts("memory-profiling_") && ends(".dat")) || (starts("bytehound_") && ends(".log"));
    case Backend::Jemalloc: return starts("jeprof.") && ends(".heap");
    case Backend::Heaptrack: return starts("heaptrack.") && ends(".raw");
    case Backend::None: return starts("memprofile-mem.") && ends(".mem.json") && name.size() > 24;
    case Backend::Memray: return memray_capture_pid(name) >= 0;
    case Backend::Tcmalloc: return starts("tcmalloc.") && ends(".heap");
  }
  return false;
}

uint64_t profile_budget_bytes(const LauncherConfig& cfg) {
  constexpr uint64_t kMiB = 1024 * 1024;
  if (cfg.max_profile_mb) return cfg.max_profile_mb * kMiB;
  struct statvfs vfs;
  if (statvfs(cfg.output_dir.c_str(), &vfs) != 0) return 1024 * kMiB;
  return std::min<uint64_t>(static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize / 10, 1024 * kMiB);
}

std::optional<uint64_t> parse_duration_ms(const std::string& text) {
  size_t digits = text.find_first_not_of("0123456789");
  if (text.empty() || digits == 0) return std::nullopt;
  std::string number = text.substr(0, digits), unit = digits == std::string::npos ? "s" : text.substr(digits);
  if (number.size() > 9) return std::nullopt;
  uint64_t scale = unit == "s" ? 1000 : unit == "m" ? 60000 : unit == "h" ? 3600000 : unit == "d" ? 86400000 : 0;
  if (!scale) return std::nullopt;
  uint64_t ms = std::stoull(number) * scale;
  if (ms < 1000 || ms > 7 * 86400000ull) return std::nullopt;
  return ms;
}

std::string forked_children_unrecorded(Backend b) {
  switch (b) {
    case Backend::Jemalloc: return "";
    case Backend::Heaptrack:
      return "heaptrack does not record a child forked without exec (its fork handler turns tracking off there)";
    case Backend::Bytehound: return "bytehound does not record a child forked without exec";
    case Backend::None: return "";
    case Backend::Memray: return "";
    case Backend::Tcmalloc: return "";  // the control library names each process's dumps by its pid
  }
  return "";
}

bool is_memory_record(const std::string& name) {
  const std::string tail = ".mem.json";
  return is_profile_file(Backend::None, name) ||
         (name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0 &&
          (is_profile_file(Backend::Jemalloc, name.substr(0, name.size() - tail.size())) ||
           is_profile_file(Backend::Tcmalloc, name.substr(0, name.size() - tail.size()))));
}

bool is_process_record(const std::string& name) {
  const std::string head = "memprofile-proc.", tail = ".json";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  std::string pid = name.substr(head.size(), name.size() - head.size() - tail.size());
  return pid.size() <= 9 && pid.find_first_not_of("0123456789") == std::string::npos;
}

namespace {
// The digits of name[from, to), one dot- or underscore-separated field of
// a profile's name: a pid, or -1.
long pid_field(const std::string& name, size_t from, size_t to) {
  if (to <= from || to - from > 9) return -1;
  long v = 0;
  for (size_t i = from; i < to; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}
}  // namespace

long memray_capture_pid(const std::string& name) {
  // memray.PID.bin, memray.PID.N.bin (the Nth start in that process, by
  // memprofile start), and NAME.CHILD for a child forked under follow_fork
  // (memray names it so): the process whose capture it is.
  const std::string head = "memray.", mid = ".bin";
  if (name.rfind(head, 0) != 0) return -1;
  size_t bin = name.find(mid, head.size());
  if (bin == std::string::npos) return -1;
  auto digits = [&](size_t from, size_t to) { return pid_field(name, from, to); };
  size_t dot = name.find('.', head.size());
  long pid = digits(head.size(), dot < bin ? dot : bin);
  if (pid < 0 || (dot < bin && digits(dot + 1, bin) < 0)) return -1;
  if (bin + mid.size() == name.size()) return pid;
  return name[bin + mid.size()] == '.' ? digits(bin + mid.size() + 1, name.size()) : -1;
}

std::string memray_marks_name(const std::string& capture) {
  if (memray_capture_pid(capture) < 0) return "";
  return "memray-marks." + capture.substr(std::char_traits<char>::length("memray."));
}

bool is_memray_marks(const std::string& name) {
  const std::string head = "memray-marks.";
  return name.rfind(head, 0) == 0 && memray_capture_pid("memray." + name.substr(head.size())) >= 0;
}

long profile_file_pid(Backend b, const std::string& name) {
  if (!is_profile_file(b, name)) return -1;
  auto field = [&](size_t from, size_t to) { return pid_field(name, from, to); };
  switch (b) {
    case Backend::Jemalloc: {  // PREFIX.PID.SEQ.KIND.heap: the third field from the end
      size_t end = name.size() - 5, kind = name.rfind('.', end - 1);
      if (kind == std::string::npos || kind == 0) return -1;
      size_t seq = name.rfind('.', kind - 1);
      if (seq == std::string::npos || seq == 0) return -1;
      size_t pid = name.rfind('.', seq - 1);
      return pid == std::string::npos ? -1 : field(pid + 1, seq);
    }
    case Backend::Heaptrack: return field(10, name.size() - 4);
    case Backend::Bytehound: {  // ..._PID.dat, ..._PID.log
      size_t end = name.size() - 4, us = name.rfind('_', end - 1);
      return us == std::string::npos ? -1 : field(us + 1, end);
    }
    case Backend::None: {  // memprofile-mem.PID.SEQ.mem.json
      size_t seq = name.rfind('.', name.size() - 10);
      return seq == std::string::npos || seq < 15 ? -1 : field(15, seq);
    }
    case Backend::Memray: return memray_capture_pid(name);
    case Backend::Tcmalloc: {  // tcmalloc.PID.SEQ.heap
      size_t seq = name.rfind('.', name.size() - 6);
      return seq == std::string::npos || seq < 9 ? -1 : field(9, seq);
    }
  }
  return -1;
}

long output_file_pid(const std::string& name) {
  const std::string record = ".mem.json", marks = "memray-marks.";
  if (is_process_record(name)) return std::stol(name.substr(16, name.size() - 21));
  if (name.rfind(marks, 0) == 0) return memray_capture_pid("memray." + name.substr(marks.size()));
  std::string base = name;
  if (is_memory_record(name) && !is_profile_file(Backend::None, name)) base = name.substr(0, name.size() - record.size());
  for (Backend b : {Backend::Jemalloc, Backend::Heaptrack, Backend::Bytehound, Backend::None, Backend::Memray,
                    Backend::Tcmalloc})
    if (long pid = profile_file_pid(b, base); pid >= 0) return pid;
  return -1;
}

std::vector<std::string> library_markers(Backend b) {
  switch (b) {
    case Backend::Bytehound: return {"libbytehound"};
    case Backend::Jemalloc: return {"libjemalloc"};
    case Backend::Heaptrack: return {"libheaptrack_preload"};
    case Backend::None: return {"libmemprofile_ctl"};
    case Backend::Memray: return {"/_memray."};  // its extension, once imported
    case Backend::Tcmalloc: return {};  // the profiler is the program's own (attach.cpp)
  }
  return {};
}

void load_launcher_config(const std::string& path, LauncherConfig& cfg) {
  std::ifstream in(path);
  if (!in) return;  // no baked-in config: defaults and flags
  std::ostringstream text;
  text << in.rdbuf();
  parse_launcher_config(text.str(), path, cfg);
}

namespace {
std::vector<std::string> json_argv(const std::string& value, const std::string& path, int n, const std::string& key) {
  // Counted before it is parsed: the config file comes from the image.
  nlohmann::json j;
  try {
    j = parse_json_bounded(value, path + ": line " + std::to_string(n));
  } catch (const FileError& e) {
    if (std::string(e.what()).find("malformed JSON") == std::string::npos) throw;  // a limit
  }
  std::vector<std::string> out;
  if (j.is_array()) {
    for (const auto& item : j) {
      if (!item.is_string()) break;
      out.push_back(item.get<std::string>());
    }
    if (out.size() == j.size()) return out;
  }
  throw FileError(path, "line " + std::to_string(n) + ": " + key + " must be a JSON array of strings, as in an image config");
}
}  // namespace

void apply_env_overrides(LauncherConfig& cfg, const EnvLookup& lookup) {
  std::string value;
  auto env = [&](const char* name) -> const char* {
    if (lookup) {
      value = lookup(name);
      return value.empty() ? nullptr : value.c_str();
    }
    const char* v = getenv(name);
    return v && *v ? v : nullptr;
  };
  if (const char* v = env("MEMPROFILE_BACKEND")) {
    parse_backend(v);
    cfg.backend = v;
  }
  if (const char* v = env("MEMPROFILE_PRELOAD")) cfg.preload = v;
  if (const char* v = env("MEMPROFILE_OUTPUT_DIR")) cfg.output_dir = v;
  if (const char* v = env("MEMPROFILE_TARGET")) cfg.target = v;
  if (const char* v = env("MEMPROFILE_SERVE")) cfg.serve = v;
  if (const char* v = env("MEMPROFILE_SERVE_TOKEN_FILE")) cfg.serve_token_file = v;
  auto number = [](const char* name, const char* v) -> uint64_t {
    char* end = nullptr;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || *v == '-') throw Error(std::string(name) + " is not a number: " + v);
    return n;
  };
  if (const char* v = env("MEMPROFILE_MIN_FREE_MB")) cfg.min_free_mb = number("MEMPROFILE_MIN_FREE_MB", v);
  if (const char* v = env("MEMPROFILE_MAX_PROFILE_MB")) cfg.max_profile_mb = number("MEMPROFILE_MAX_PROFILE_MB", v);
  if (const char* v = env("MEMPROFILE_SNAPSHOT_EVERY")) {
    auto ms = parse_duration_ms(v);
    if (!ms) throw Error(std::string("MEMPROFILE_SNAPSHOT_EVERY is not a duration of 1s to 7d (30s, 5m, 1h): ") + v);
    cfg.snapshot_every_ms = *ms;
  }
  if (const char* v = env("MEMPROFILE_DORMANT")) cfg.dormant = std::string(v) == "1" || std::string(v) == "true";
  if (const char* v = env("MEMPROFILE_CTL_LIBRARY")) cfg.ctl_library = v;
}

std::vector<std::string> config_command(const LauncherConfig& cfg, const std::vector<std::string>& args) {
  std::vector<std::string> argv = cfg.entrypoint;
  const auto& rest = args.empty() ? cfg.cmd : args;
  argv.insert(argv.end(), rest.begin(), rest.end());
  return argv;
}

void parse_launcher_config(const std::string& text, const std::string& path, LauncherConfig& cfg) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) throw FileError(path, "line " + std::to_string(n) + ": expected KEY=VALUE");
    std::string key = line.substr(b, eq - b), value = line.substr(eq + 1);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    size_t vb = value.find_first_not_of(" \t");
    value = vb == std::string::npos ? "" : value.substr(vb);
    if (key == "backend") {
      parse_backend(value);
      cfg.backend = value;
    } else if (key == "preload") {
      cfg.preload = value;
    } else if (key == "output_dir") {
      cfg.output_dir = value;
    } else if (key == "serve") {
      cfg.serve = value;
    } else if (key == "serve_token_file") {
      cfg.serve_token_file = value;
    } else if (key == "target") {
      cfg.target = value;
    } else if (key == "min_free_mb") {
      try {
        cfg.min_free_mb = std::stoull(value);
      } catch (const std::exception&) {
        throw FileError(path, "line " + std::to_string(n) + ": min_free_mb is not a number");
      }
    } else if (key == "max_profile_mb") {
      try {
        cfg.max_profile_mb = std::stoull(value);
      } catch (const std::exception&) {
        throw FileError(path, "line " + std::to_string(n) + ": max_profile_mb is not a number");
      }
    } else if (key == "snapshot_every") {
      auto ms = parse_duration_ms(value);
      if (!ms)
        throw FileError(path, "line " + std::to_string(n) + ": snapshot_every is not a duration of 1s to 7d (30s, 5m, 1h)");
      cfg.snapshot_every_ms = *ms;
    } else if (key == "dormant") {
      cfg.dormant = value == "1" || value == "true";
    } else if (key == "ctl_library") {
      cfg.ctl_library = value;
    } else if (key == "strict") {
      cfg.strict = value == "1" || value == "true";
    } else if (key == "entrypoint") {
      cfg.entrypoint = json_argv(value, path, n, key);
      cfg.has_command = true;
    } else if (key == "cmd") {
      cfg.cmd = json_argv(value, path, n, key);
      cfg.has_command = true;
    } else {
      throw FileError(path, "line " + std::to_string(n) + ": unknown key '" + key + "'");
    }
  }
}

}  // namespace memprofile
