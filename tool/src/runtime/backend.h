// What memprofile knows about each heap profiler it injects: where its
// preload library lives in our images, the environment it reads, and what
// its output files are called. Shared by exec, attached and collect, and by
// the config file baked into images (/etc/memprofile/exec.conf).
#pragma once

#include <map>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace memprofile {

// None: the control library alone, no heap profiler (`exec --backend none`):
// status gives each process's memory as the kernel, the allocator and the
// cgroup see it, and a snapshot is a memory record only
// (memprofile-mem.PID.SEQ.mem.json), so a service can carry it at no cost
// and learn whether a heap profile is the tool for its growth at all.
// Memray: a CPython interpreter tracked by memray, started inside it by
// memprofile's bootstrap (python/sitecustomize.py beside the control
// library, on PYTHONPATH): no preload library; one capture per process,
// memray.PID.bin (memray.PID.bin.CHILD for a forked child).
// Tcmalloc: gperftools' heap profiler, linked into the program with its
// tcmalloc (which then defines malloc, so no preload would see the heap):
// exec selects it in place of the preload backend the user named, sets
// HEAPPROFILE, and preloads the control library alone, which names each
// process's dumps tcmalloc.PID.SEQ.heap (files.c) and dumps on snapshot
// through HeapProfilerDump where the program exports it.
enum class Backend { Bytehound, Jemalloc, Heaptrack, None, Memray, Tcmalloc };
// What exec, attached and check take when no backend is named.
constexpr Backend kDefaultBackend = Backend::Bytehound;

// memray's bootstrap as it sits in python/ beside the control library
// (ctl/python/): the entry Python's site imports, and its package of one
// module a job. Each must be there: a bootstrap without one of them tracks
// nothing. (tests/unit/test_launcher.cpp holds this list against
// ctl/python/.)
inline const std::vector<std::string> kMemrayBootstrapFiles = {
    "sitecustomize.py",           "_memprofile_memray/__init__.py", "_memprofile_memray/budget.py",
    "_memprofile_memray/control.py", "_memprofile_memray/marks.py",  "_memprofile_memray/names.py",
    "_memprofile_memray/signals.py", "_memprofile_memray/sockets.py", "_memprofile_memray/tracker.py"};
// The bootstrap's files in `dir` that `present` does not find, in words
// ("" when none): each by its path, or the package's directory when none of
// its files is there.
std::string missing_bootstrap(const std::string& dir, const std::function<bool(const std::string& path)>& present);

// One profiler backend as one row: everything the rest of memprofile reads
// of it (exec, attached, preflight, collect, report's stacks, serve), so that
// a new backend is a row here, a reader in profile/'s format table
// (profile/profiles.cpp), its entry in the control library's table
// (ctl/backend.c) and its recipe (docs/architecture.md lists them).
struct BackendRow {
  Backend id;
  const char* name;     // as --backend, MEMPROFILE_BACKEND and exec.conf take it
  const char* preload;  // its library's install path in memprofile images ("" when it loads none)
  // A word in a preload library's file name that says it is this backend
  // (preflight's LD_PRELOAD in an image's Env), or nullptr.
  const char* preload_word;
  // Substrings of its library's path in /proc/PID/maps (attached, sites).
  std::vector<const char*> markers;
  // attached tells it by its mapped library when nothing names it: the
  // order among those that do (1 first), 0 for never.
  int found_by_library;
  // Prefixes of the file names of its own code in a stack: report leaves
  // those frames out of a site.
  std::vector<const char*> own_frames;
  // The variable it reads for where it writes (attached finds the output
  // directory there), or nullptr; `output_names_file`: its value is a file
  // in that directory (the profiler's own), not the directory (memprofile's).
  const char* output_variable;
  bool output_names_file;
  // Its files in the output directory: a name is one of its profiles
  // (or logs), and the pid that name carries (-1 when none).
  bool (*is_file)(const std::string& name);
  long (*file_pid)(const std::string& name);
  // The settings it reads, with memprofile's defaults, for an output
  // directory (backend_env says what the flags mean).
  std::vector<std::pair<std::string, std::string>> (*env)(const std::string& dir, bool dispatcher, bool aarch64,
                                                          bool dormant, uint64_t dump_every_mb);
  // A value of the output directory its own settings format cannot hold,
  // in one line ("" when it fits), or nullptr (settings_unsafe).
  std::string (*unsafe_dir)(const std::string& dir);
  // It loads no preload library of its own, but a bootstrap on PYTHONPATH.
  bool bootstrap_on_pythonpath;
  // It writes one continuous file of the whole run (writes_one_file).
  bool one_file;
  // memprofile takes snapshots for it (takes_snapshots).
  bool snapshots;
  // Why it does not record a child forked without exec ("" when it does).
  const char* forked_unrecorded;
  // Why it cannot start dormant ("" when it can).
  const char* dormant_refused;
  // How report's header names its files: the noun ("heaptrack trace"),
  // whether the pid is said beside a file's name (never, when it is known,
  // always), what is said of what the profiler kept ("" for nothing beyond
  // the noun), and of a file cut short; dumps: whether their sampling is
  // always said, as a period (else "every allocation recorded" without one).
  enum class HeaderPid { Never, Known, Always };
  struct ReportWords {
    const char* noun;
    HeaderPid pid;
    const char* kept;
    const char* cut;
    bool sampled;
  } report;
};
// Every backend, in the order --backend lists them.
const std::vector<BackendRow>& backend_rows();
const BackendRow& backend_row(Backend b);
// "bytehound, jemalloc, heaptrack, memray, tcmalloc or none": the names, for
// a flag's help; `preloaded`: only those with a preload library of their own.
std::string backend_names(bool preloaded = false);
const char* to_string(Backend);
Backend parse_backend(const std::string& name);  // throws Error

// Install path of the backend's preload library in memprofile images ("" for
// None: the control library is all it loads).
std::string default_preload(Backend b);
// The settings the backend reads, with memprofile's defaults for `output_dir`.
// `dispatcher`: the program execs the real target (bytehound must then keep
// LD_PRELOAD across exec). `aarch64`: the target runs on arm64. `dormant`:
// loaded with recording off, for `memprofile start` (not heaptrack: see
// dormant_unsupported). `dump_every_mb`: the allocator's own dump each
// time that many MiB more are allocated, where it has one (jemalloc's
// lg_prof_interval; 0: none).
std::vector<std::pair<std::string, std::string>> backend_env(Backend b, const std::string& output_dir, bool dispatcher,
                                                           bool aarch64, bool dormant = false,
                                                           uint64_t dump_every_mb = 1024);
// A value that the backend's own settings format cannot hold, said in one
// line ("" when every value fits): jemalloc splits MALLOC_CONF at ',' and
// ':', bytehound expands '%' in its output names, heaptrack replaces "$$",
// and the loader splits LD_PRELOAD at ':' and blanks. Such a value would
// change the profiler's settings or send its files elsewhere, so exec
// refuses it (LAUNCHER_CONFIG) before the app starts.
std::string settings_unsafe(Backend b, const std::string& output_dir, const std::string& preload,
                            const std::string& ctl_library);
// The backend writes one continuous file of the whole run (heaptrack's
// trace, bytehound's .dat) rather than a dump per snapshot: what is in use
// now is read from that file as it stands, and `snapshot` has nothing to do.
bool writes_one_file(Backend b);
// Why the backend cannot start dormant ("" when it can).
std::string dormant_unsupported(Backend b);
// The control library exec loads after the profiler (ctl/ctl.h): it serves
// `memprofile start|stop|snapshot|status` and enforces the disk budget.
constexpr const char* kDefaultCtlLibrary = "/usr/lib/memprofile/libmemprofile_ctl.so";
// Its socket in the output directory, for the process `pid` as it sees itself.
std::string ctl_socket_name(long pid);
// Whether a file name in the output directory is one of this backend's profiles (or logs).
bool is_profile_file(Backend b, const std::string& name);
// NAME.mem.json beside a jemalloc snapshot NAME: where the process's memory
// was when the control library took it (ctl/memrecord.c); with --backend
// none the record is the snapshot, memprofile-mem.PID.SEQ.mem.json.
bool is_memory_record(const std::string& name);
// The control library's record of a process of the tree,
// memprofile-proc.PID.json (its parent and program): collect carries it,
// report reads it.
bool is_process_record(const std::string& name);
// The pid a profile file's name carries (jemalloc PREFIX.PID.SEQ.KIND.heap,
// heaptrack.PID.raw, bytehound's ..._PID.dat and bytehound_EXE_PID.log),
// or -1 when it carries none.
long profile_file_pid(Backend b, const std::string& name);
// The pid any file of memprofile's output directory carries in its name: a
// profile or log of any backend, a memory record, a memray capture or its
// marks, a process record; -1 for another name.
long output_file_pid(const std::string& name);
// memray's capture of the process `pid` (the bootstrap's name for it).
std::string memray_capture_name(long pid);
// The pid a memray capture's name carries: memray.PID.bin, or the child's
// in memray.PID.bin.CHILD; -1 for another name.
long memray_capture_pid(const std::string& name);
// The marks file of the capture named `capture` (memprofile snapshot and
// --snapshot-every under memray): memray-marks. and the rest of its name,
// so that it sorts before the capture (report reads it first, also from a
// collect archive); "" when `capture` is not a capture's name.
std::string memray_marks_name(const std::string& capture);
// True when `name` is a capture's marks file.
bool is_memray_marks(const std::string& name);
// Substrings that identify the backend's library in /proc/PID/maps.
std::vector<std::string> library_markers(Backend b);

// Whether the backend records a child forked without exec, and if not why,
// in one line ("" when it does).
std::string forked_children_unrecorded(Backend b);
// Whether memprofile takes snapshots for the backend: jemalloc's dumps,
// none's memory records, marks in memray's capture (where report ends a
// span); bytehound and heaptrack write one continuous file.
bool takes_snapshots(Backend b);
}  // namespace memprofile
