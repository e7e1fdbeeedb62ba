#include "runtime/backend.h"

#include <cstdio>

#include <unistd.h>

#include <algorithm>

#include "base/error.h"

namespace memprofile {

namespace {

bool starts(const std::string& name, const char* p) { return name.rfind(p, 0) == 0; }
bool ends(const std::string& name, const char* s) {
  size_t n = std::char_traits<char>::length(s);
  return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
}

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

// ---- bytehound: MEMORY_PROFILER_OUTPUT's memory-profiling_EXE_TIME_PID.dat and its log

bool bytehound_file(const std::string& n) {
  return (starts(n, "memory-profiling_") && ends(n, ".dat")) || (starts(n, "bytehound_") && ends(n, ".log"));
}
long bytehound_pid(const std::string& n) {  // ..._PID.dat, ..._PID.log
  size_t end = n.size() - 4, us = n.rfind('_', end - 1);
  return us == std::string::npos ? -1 : pid_field(n, us + 1, end);
}
std::vector<std::pair<std::string, std::string>> bytehound_env(const std::string& dir, bool dispatcher, bool aarch64,
                                                               bool dormant, uint64_t) {
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
std::string bytehound_unsafe(const std::string& dir) {
  return dir.find('%') == std::string::npos
             ? ""
             : "the output directory " + dir + " holds '%', which bytehound expands in its output file names (%p, %t, %e, %n)";
}

// ---- jemalloc: MALLOC_CONF's prof_prefix, PREFIX.PID.SEQ.KIND.heap

bool jemalloc_file(const std::string& n) { return starts(n, "jeprof.") && ends(n, ".heap"); }
long jemalloc_pid(const std::string& n) {  // the third field from the end
  size_t end = n.size() - 5, kind = n.rfind('.', end - 1);
  if (kind == std::string::npos || kind == 0) return -1;
  size_t seq = n.rfind('.', kind - 1);
  if (seq == std::string::npos || seq == 0) return -1;
  size_t pid = n.rfind('.', seq - 1);
  return pid == std::string::npos ? -1 : pid_field(n, pid + 1, seq);
}
std::vector<std::pair<std::string, std::string>> jemalloc_env(const std::string& dir, bool, bool, bool dormant,
                                                              uint64_t dump_every_mb) {
  // Sample about every 512 KiB allocated (jemalloc's default rate, cheap
  // enough for production), dump every dump_every_mb MiB allocated (1 GiB
  // unless set; a power of two, as lg_prof_interval is its log; -1 for
  // none) and at exit. Dormant: profiling is compiled in and set up, but
  // nothing is sampled until memprofile start sets prof.active.
  int lg_interval = -1;
  if (dump_every_mb) {
    lg_interval = 20;
    while ((uint64_t{1} << (lg_interval - 20)) < dump_every_mb) ++lg_interval;
  }
  return {{"MALLOC_CONF", std::string("prof:true,prof_active:") + (dormant ? "false" : "true") +
                              ",lg_prof_sample:19,lg_prof_interval:" + std::to_string(lg_interval) +
                              ",prof_final:true,prof_prefix:" + dir + "/jeprof"}};
}
std::string jemalloc_unsafe(const std::string& dir) {
  return dir.find_first_of(",:") == std::string::npos
             ? ""
             : "the output directory " + dir +
                   " holds ',' or ':', which jemalloc's MALLOC_CONF reads as the end of its prof_prefix (the rest "
                   "would be settings of its own)";
}

// ---- heaptrack: DUMP_HEAPTRACK_OUTPUT, heaptrack.PID.raw

bool heaptrack_file(const std::string& n) { return starts(n, "heaptrack.") && ends(n, ".raw"); }
long heaptrack_pid(const std::string& n) { return pid_field(n, 10, n.size() - 4); }
std::vector<std::pair<std::string, std::string>> heaptrack_env(const std::string& dir, bool, bool, bool, uint64_t) {
  return {{"DUMP_HEAPTRACK_OUTPUT", dir + "/heaptrack.$$.raw"}};  // heaptrack replaces $$ with the pid
}
std::string heaptrack_unsafe(const std::string& dir) {
  return dir.find("$$") == std::string::npos
             ? ""
             : "the output directory " + dir + " holds \"$$\", which heaptrack replaces with the pid in its output file name";
}

// ---- memray: the bootstrap's memray.PID.bin

bool memray_file(const std::string& n) { return memray_capture_pid(n) >= 0; }
std::vector<std::pair<std::string, std::string>> memray_env(const std::string& dir, bool, bool, bool, uint64_t) {
  // Read by memprofile's bootstrap (python/sitecustomize.py); PYTHONPATH
  // and the interpreter it tracks are exec's to set.
  return {{"MEMPROFILE_MEMRAY_DIR", dir}};
}

// ---- tcmalloc: HEAPPROFILE, renamed by the control library to tcmalloc.PID.SEQ.heap

bool tcmalloc_file(const std::string& n) { return starts(n, "tcmalloc.") && ends(n, ".heap"); }
long tcmalloc_pid(const std::string& n) {
  size_t seq = n.rfind('.', n.size() - 6);
  return seq == std::string::npos || seq < 9 ? -1 : pid_field(n, 9, seq);
}
std::vector<std::pair<std::string, std::string>> tcmalloc_env(const std::string& dir, bool, bool, bool, uint64_t) {
  // gperftools names the dumps PREFIX.NNNN.heap, and a child's that
  // execs PREFIX_PID.NNNN.heap; the control library renames them by
  // the pid that writes them (files.c). The prefix is exec's own, so
  // that the profiler's clean-up of PREFIX.*.heap at start removes
  // nothing but what this very launch would have left.
  return {{"HEAPPROFILE", dir + "/tcmalloc-" + std::to_string(getpid())}};
}

// ---- none: the control library's memory records, memprofile-mem.PID.SEQ.mem.json

bool none_file(const std::string& n) { return starts(n, "memprofile-mem.") && ends(n, ".mem.json") && n.size() > 24; }
long none_pid(const std::string& n) {
  size_t seq = n.rfind('.', n.size() - 10);
  return seq == std::string::npos || seq < 15 ? -1 : pid_field(n, 15, seq);
}
std::vector<std::pair<std::string, std::string>> no_env(const std::string&, bool, bool, bool, uint64_t) { return {}; }

const std::vector<BackendRow> kRows = {
    {Backend::Bytehound, "bytehound", "/usr/share/libbytehound.so",  // numaflow's guide's path
     "bytehound", {"libbytehound"}, 3, {"libbytehound"}, "MEMORY_PROFILER_OUTPUT", true, bytehound_file, bytehound_pid,
     bytehound_env, bytehound_unsafe, false, true, false, "bytehound does not record a child forked without exec", "",
     {"bytehound profile", BackendRow::HeaderPid::Always,
      " that bytehound kept (with MEMORY_PROFILER_CULL_TEMPORARY_ALLOCATIONS, as memprofile exec sets it, not those "
      "freed within 10 s)",
      " (the file is cut short: still written, or the process was killed)", false}},
    {Backend::Jemalloc, "jemalloc", "/usr/lib/memprofile/libjemalloc.so.2", "jemalloc", {"libjemalloc"}, 1,
     {"libjemalloc"}, "MALLOC_CONF", true, jemalloc_file, jemalloc_pid, jemalloc_env, jemalloc_unsafe, false, false, true, "",
     "", {"jemalloc heap dump", BackendRow::HeaderPid::Always, "", "", true}},
    {Backend::Heaptrack, "heaptrack", "/usr/lib/memprofile/libheaptrack_preload.so", "heaptrack",
     {"libheaptrack_preload"}, 2, {"libheaptrack"}, "DUMP_HEAPTRACK_OUTPUT", true, heaptrack_file, heaptrack_pid,
     heaptrack_env, heaptrack_unsafe, false, true, false,
     "heaptrack does not record a child forked without exec (its fork handler turns tracking off there)",
     "heaptrack cannot start dormant: it records from the first allocation, and a trace started later misses "
     "the frees of what was allocated before (use jemalloc or bytehound for dormant mode)",
     {"heaptrack trace", BackendRow::HeaderPid::Never, "", " (the trace is cut short)", false}},
    // No preload: the bootstrap imports memray; its extension, once imported, is in the maps.
    {Backend::Memray, "memray", "", nullptr, {"/_memray."}, 4, {}, "MEMPROFILE_MEMRAY_DIR", false, memray_file,
     memray_capture_pid, memray_env, nullptr, true, false, true, "", "",
     {"memray capture", BackendRow::HeaderPid::Always, "",
      " (the file is cut short: still written, or the process was killed)", false}},
    // The profiler is the program's own (attach.cpp knows it by exec's settings).
    {Backend::Tcmalloc, "tcmalloc", "", nullptr, {}, 0, {}, "MEMPROFILE_CTL_DIR", false, tcmalloc_file, tcmalloc_pid,
     tcmalloc_env, nullptr, false, false, true, "",
     "gperftools' heap profiler records from the program's start (HEAPPROFILE) and cannot be switched on later",
     {"gperftools heap profile", BackendRow::HeaderPid::Known, "", "", false}},
    // The control library alone: its frames are memprofile's own.
    {Backend::None, "none", "", nullptr, {"libmemprofile_ctl"}, 0, {"libmemprofile"}, "MEMPROFILE_CTL_DIR", false, none_file,
     none_pid, no_env, nullptr, false, false, true, "",
     "--backend none loads no profiler: there is nothing to keep dormant",
     {"memory record", BackendRow::HeaderPid::Always, "", "", false}},
};

}  // namespace

const std::vector<BackendRow>& backend_rows() { return kRows; }

const BackendRow& backend_row(Backend b) {
  for (const auto& r : kRows)
    if (r.id == b) return r;
  return kRows.front();
}

std::string backend_names(bool preloaded) {
  std::vector<const char*> names;
  for (const auto& r : kRows)
    if (!preloaded || *r.preload) names.push_back(r.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += std::string(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

const char* to_string(Backend b) { return backend_row(b).name; }

Backend parse_backend(const std::string& name) {
  for (const auto& r : kRows)
    if (name == r.name) return r.id;
  throw Error("unknown backend '" + name +
              "' (bytehound, jemalloc, heaptrack, memray for a Python interpreter, tcmalloc for a program with "
              "gperftools' heap profiler linked in, or none for the control library alone)");
}

std::string default_preload(Backend b) { return backend_row(b).preload; }

std::string dormant_unsupported(Backend b) { return backend_row(b).dormant_refused; }

std::string forked_children_unrecorded(Backend b) { return backend_row(b).forked_unrecorded; }

bool writes_one_file(Backend b) { return backend_row(b).one_file; }

bool takes_snapshots(Backend b) { return backend_row(b).snapshots; }

namespace {

// A control character's name, for the one line that refuses it.
std::string control_name(unsigned char c) {
  static const char* const names[] = {"NUL", "SOH", "STX", "ETX", "EOT", "ENQ", "ACK", "BEL", "a backspace", "a tab",
                                      "a newline", "a vertical tab", "a form feed", "a carriage return"};
  char code[16];
  std::snprintf(code, sizeof code, "U+%04X", c);
  if (c < sizeof names / sizeof *names) return std::string(names[c]) + " (" + code + ")";
  return c == 0x7f ? std::string("DEL (U+007F)") : std::string("a control character (") + code + ")";
}

}  // namespace

std::string settings_unsafe(Backend b, const std::string& output_dir, const std::string& preload,
                            const std::string& ctl_library) {
  const BackendRow& row = backend_row(b);
  // Every backend's settings and the control library's are text a line
  // and a field at a time (MALLOC_CONF, the launcher's environment, the
  // records' JSON): a control character in the directory would end one
  // early, or split it, whatever the backend.
  for (size_t i = 0; i < output_dir.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(output_dir[i]);
    if (c < 0x20 || c == 0x7f) {
      std::string shown;
      for (unsigned char d : output_dir) shown += d < 0x20 || d == 0x7f ? '?' : static_cast<char>(d);
      return "the output directory " + shown + " holds " + control_name(c) + " at byte " + std::to_string(i + 1) +
             ", which the profilers' settings and the control library read as the end of a value: name a directory "
             "without control characters";
    }
  }
  if (row.unsafe_dir)
    if (std::string why = row.unsafe_dir(output_dir); !why.empty()) return why;
  auto has = [](const std::string& v, const char* chars) { return v.find_first_of(chars) != std::string::npos; };
  if (row.bootstrap_on_pythonpath)  // the bootstrap beside the control library goes first on PYTHONPATH
    return has(ctl_library, ":") ? "the control library " + ctl_library +
                                       " holds ':', where Python splits PYTHONPATH (its bootstrap goes there)"
                                 : "";
  for (const std::string* lib : {&preload, &ctl_library})
    if (has(*lib, ": \t\n")) return "the library " + *lib + " holds ':' or a blank, where the loader splits LD_PRELOAD";
  return "";
}

std::string ctl_socket_name(long pid) { return "memprofile-ctl." + std::to_string(pid) + ".sock"; }

std::vector<std::pair<std::string, std::string>> backend_env(Backend b, const std::string& dir, bool dispatcher,
                                                           bool aarch64, bool dormant, uint64_t dump_every_mb) {
  return backend_row(b).env(dir, dispatcher, aarch64, dormant, dump_every_mb);
}

std::string memray_capture_name(long pid) { return "memray." + std::to_string(pid) + ".bin"; }

bool is_profile_file(Backend b, const std::string& name) { return backend_row(b).is_file(name); }

long profile_file_pid(Backend b, const std::string& name) {
  return is_profile_file(b, name) ? backend_row(b).file_pid(name) : -1;
}

std::vector<std::string> library_markers(Backend b) {
  const auto& m = backend_row(b).markers;
  return {m.begin(), m.end()};
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

long output_file_pid(const std::string& name) {
  const std::string record = ".mem.json", marks = "memray-marks.";
  if (is_process_record(name)) return std::stol(name.substr(16, name.size() - 21));
  if (name.rfind(marks, 0) == 0) return memray_capture_pid("memray." + name.substr(marks.size()));
  std::string base = name;
  if (is_memory_record(name) && !is_profile_file(Backend::None, name)) base = name.substr(0, name.size() - record.size());
  for (const auto& row : kRows)
    if (long pid = profile_file_pid(row.id, base); pid >= 0) return pid;
  return -1;
}

std::string missing_bootstrap(const std::string& dir, const std::function<bool(const std::string& path)>& present) {
  std::vector<std::string> missing;
  size_t package_files = 0, package_missing = 0;
  const std::string package = "_memprofile_memray/";
  for (const std::string& file : kMemrayBootstrapFiles) {
    const bool in_package = file.rfind(package, 0) == 0;
    package_files += in_package;
    if (present(dir + "/" + file)) continue;
    package_missing += in_package;
    missing.push_back(dir + "/" + file);
  }
  if (package_missing && package_missing == package_files) {
    missing.erase(std::remove_if(missing.begin(), missing.end(),
                                 [&](const std::string& p) { return p.rfind(dir + "/" + package, 0) == 0; }),
                  missing.end());
    missing.push_back(dir + "/" + package + " (the package)");
  }
  std::string words;
  for (const auto& m : missing) words += (words.empty() ? "" : ", ") + m;
  return words;
}

}  // namespace memprofile
