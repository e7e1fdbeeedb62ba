// The launcher's settings (`memprofile exec`): the config file baked into
// images (/etc/memprofile/exec.conf), the MEMPROFILE_* environment over it,
// and exec's flags over both. What the settings mean for one profiler is
// its row's (runtime/backend.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace memprofile {

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
  // jemalloc's own dump each time this many MiB more are allocated
  // (lg_prof_interval; 0: none): with the exit's, the only dumps of a
  // program whose jemalloc the control library cannot reach.
  uint64_t dump_every_mb = 1024;
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
// When jemalloc dumps on its own, for dump_every_mb: "at exit and every 1
// GiB allocated", or "at exit only".
std::string dumps_words(uint64_t dump_every_mb);
// Reads `path` into `cfg` if it exists; throws FileError on a bad line.
void load_launcher_config(const std::string& path, LauncherConfig& cfg);
// The MEMPROFILE_* variables of exec's settings (runtime/exec_settings.h)
// from the environment, over the config file (flags go over both). They let a pod spec tune the launcher
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
