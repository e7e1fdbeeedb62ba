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
const char* to_string(Backend);
Backend parse_backend(const std::string& name);  // throws Error

// Install path of the backend's preload library in memprofile images ("" for
// None: the control library is all it loads).
std::string default_preload(Backend b);
// The settings the backend reads, with memprofile's defaults for `output_dir`.
// `dispatcher`: the program execs the real target (bytehound must then keep
// LD_PRELOAD across exec). `aarch64`: the target runs on arm64. `dormant`:
// loaded with recording off, for `memprofile start` (not heaptrack: see
// dormant_unsupported).
std::vector<std::pair<std::string, std::string>> backend_env(Backend b, const std::string& output_dir, bool dispatcher,
                                                           bool aarch64, bool dormant = false);
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

// The launcher's settings: /etc/memprofile/exec.conf (KEY=VALUE lines),
// overridden by flags.
struct LauncherConfig {
  std::string backend = "bytehound";
  std::string preload;     // "" = default_preload(backend)
  std::string output_dir = "/var/memprofile";
  std::string target;      // the real process when the program is a dispatcher
  uint64_t min_free_mb = 256;
  // The profiles' disk budget while the process runs; 0: 10 % of the output
  // filesystem, at most 1 GiB.
  uint64_t max_profile_mb = 0;
  bool dormant = false;  // load the profiler with recording off
  uint64_t snapshot_every_ms = 0;  // scheduled snapshots in every process (0: none)
  std::string ctl_library = kDefaultCtlLibrary;
  bool strict = false;
  // memprofile serve beside the tree (exec --serve; MEMPROFILE_SERVE,
  // MEMPROFILE_SERVE_TOKEN_FILE, as scripts/cluster/enable.sh --serve sets them).
  std::string serve, serve_token_file;
  // The application's own Entrypoint and Cmd, as images/ bake them in for
  // `exec --from-config`: a Dockerfile cannot put a build arg into ENTRYPOINT.
  std::vector<std::string> entrypoint, cmd;
  bool has_command = false;  // either key was given
};
// The disk budget of the profiles (the control library enforces it while
// the tree runs; collect carries no more): max_profile_mb, else 10 % of the
// output directory's filesystem, at most 1 GiB.
uint64_t profile_budget_bytes(const LauncherConfig& cfg);
// A duration as --snapshot-every takes it: N (seconds), Ns, Nm, Nh or Nd,
// from 1 s to 7 days; nullopt for anything else.
std::optional<uint64_t> parse_duration_ms(const std::string& text);
// Whether the backend records a child forked without exec, and if not why,
// in one line ("" when it does).
std::string forked_children_unrecorded(Backend b);
// Whether memprofile takes snapshots for the backend: jemalloc's dumps,
// none's memory records, marks in memray's capture (where report ends a
// span); bytehound and heaptrack write one continuous file.
inline bool takes_snapshots(Backend b) {
  return b == Backend::Jemalloc || b == Backend::None || b == Backend::Memray || b == Backend::Tcmalloc;
}
// Reads `path` into `cfg` if it exists; throws FileError on a bad line.
void load_launcher_config(const std::string& path, LauncherConfig& cfg);
// MEMPROFILE_BACKEND, MEMPROFILE_PRELOAD, MEMPROFILE_OUTPUT_DIR,
// MEMPROFILE_TARGET, MEMPROFILE_MIN_FREE_MB, MEMPROFILE_MAX_PROFILE_MB,
// MEMPROFILE_DORMANT, MEMPROFILE_CTL_LIBRARY from the environment, over the
// config file (flags go over both). They let a pod spec tune the launcher
// where it cannot change its command (numaflow's containerTemplate has env
// only); unlike LD_PRELOAD they do nothing to other processes.
// `lookup` returns a variable's value ("" when unset): the process
// environment by default, an image config's Env in preflight.
using EnvLookup = std::function<std::string(const char* name)>;
void apply_env_overrides(LauncherConfig& cfg, const EnvLookup& lookup = {});
// The same from text already read (`name` is used in error messages).
void parse_launcher_config(const std::string& text, const std::string& name, LauncherConfig& cfg);
// The command `exec --from-config [-- ARGS]` runs: entrypoint + (ARGS, or cmd
// when there are none), as a container runtime combines them.
std::vector<std::string> config_command(const LauncherConfig& cfg, const std::vector<std::string>& args);
constexpr const char* kDefaultConfigPath = "/etc/memprofile/exec.conf";

}  // namespace memprofile
