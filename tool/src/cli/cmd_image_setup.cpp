// `memprofile image-setup`: the Dockerfiles' step that bakes the launcher's
// config into the image being built. A Dockerfile cannot substitute build
// args into ENTRYPOINT, so the app's original Entrypoint and Cmd travel as
// build args into /etc/memprofile/exec.conf, and the image's ENTRYPOINT is
// the constant `memprofile exec --from-config --`. It runs as a JSON-form RUN
// (app images may have no shell), so every option also reads the build arg
// of the same meaning from the environment.
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "base/error.h"
#include "runtime/launcher_config.h"

namespace memprofile {

namespace {

struct ImageSetupOptions {
  std::string entrypoint, cmd, backend = "bytehound", target, output_dir = "/var/memprofile";
  std::string root = "/", config = kDefaultConfigPath;
  std::string dormant = "false";  // DORMANT=true: recording off until memprofile start
  uint64_t max_profile_mb = 0;    // MAX_PROFILE_MB; 0: the launcher's default
  std::string snapshot_every;     // SNAPSHOT_EVERY: scheduled snapshots in every process ("": none)
};

// An image config's Entrypoint/Cmd as JSON: an array of strings, null or empty.
std::vector<std::string> argv_of(const std::string& text, const char* what) {
  if (text.empty()) return {};
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_null()) return {};
  if (j.is_array() && std::all_of(j.begin(), j.end(), [](const nlohmann::json& v) { return v.is_string(); }))
    return j.get<std::vector<std::string>>();
  throw Error(std::string("image-setup: ") + what + " is not a JSON array of strings: " + text);
}

void make_dirs(const std::string& path, mode_t mode) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string part = path.substr(0, i);
    if (mkdir(part.c_str(), mode) != 0 && errno != EEXIST) throw FileError(part, std::string("mkdir: ") + strerror(errno));
  }
}

ExitCode run_image_setup(const ImageSetupOptions& o) {
  Backend backend = parse_backend(o.backend);
  if (o.dormant != "true" && o.dormant != "false")
    throw Error("image-setup: --dormant (DORMANT) is '" + o.dormant + "', not true or false");
  const bool dormant = o.dormant == "true";
  if (dormant && !dormant_unsupported(backend).empty()) throw Error("image-setup: " + dormant_unsupported(backend));
  if (!o.snapshot_every.empty() && !parse_duration_ms(o.snapshot_every))
    throw Error("image-setup: --snapshot-every (SNAPSHOT_EVERY) '" + o.snapshot_every +
                "' is not a duration of 1s to 7d (30s, 5m, 1h)");
  auto entrypoint = argv_of(o.entrypoint, "--entrypoint (APP_ENTRYPOINT)");
  auto cmd = argv_of(o.cmd, "--cmd (APP_CMD)");
  if (entrypoint.empty() && cmd.empty())
    throw Error("image-setup: the app's Entrypoint and Cmd are both empty: nothing for memprofile exec to start "
                "(pass APP_ENTRYPOINT/APP_CMD as the app image's config has them)");
  for (const auto* dir : {&o.output_dir, &o.config})
    if (dir->empty() || (*dir)[0] != '/') throw Error("image-setup: " + *dir + " must be an absolute path");
  std::string root = o.root == "/" ? "" : o.root;
  std::string conf = root + o.config;
  make_dirs(conf.substr(0, conf.rfind('/')), 0755);
  std::ofstream out(conf, std::ios::trunc);
  if (!out) throw FileError(conf, std::string("cannot write: ") + strerror(errno));
  out << "# written by memprofile image-setup: the app's own command, run by `memprofile exec --from-config`\n"
      << "backend = " << o.backend << "\n"
      << "output_dir = " << o.output_dir << "\n";
  if (!o.target.empty()) out << "target = " << o.target << "\n";
  if (dormant) out << "dormant = 1\n";
  if (o.max_profile_mb) out << "max_profile_mb = " << o.max_profile_mb << "\n";
  if (!o.snapshot_every.empty()) out << "snapshot_every = " << o.snapshot_every << "\n";
  out << "entrypoint = " << nlohmann::json(entrypoint).dump() << "\n"
      << "cmd = " << nlohmann::json(cmd).dump() << "\n";
  out.close();
  if (!out) throw FileError(conf, "write failed");
  // Sticky and world-writable like /tmp: whatever USER the app runs as can
  // write its profile; a mounted volume replaces it at run time anyway.
  std::string dir = root + o.output_dir;
  make_dirs(dir, 0755);
  if (chmod(dir.c_str(), 01777) != 0) throw FileError(dir, std::string("chmod: ") + strerror(errno));
  std::cout << "memprofile: wrote " << conf << " (" << o.backend << (dormant ? ", dormant" : "") << ", output in "
            << o.output_dir << ")\n";
  return ExitCode::Ok;
}

}  // namespace

void setup_image_setup(CLI::App& app, ExitCode& exit_code) {
  auto o = std::make_shared<ImageSetupOptions>();
  CLI::App* cmd = app.add_subcommand(
      "image-setup", "Bake the launcher config (the app's Entrypoint and Cmd, backend, output dir) into an image "
                     "being built; the Dockerfiles' RUN step");
  cmd->add_option("--entrypoint", o->entrypoint, "the app's Entrypoint as JSON")->envname("APP_ENTRYPOINT");
  cmd->add_option("--cmd", o->cmd, "the app's Cmd as JSON")->envname("APP_CMD");
  cmd->add_option("--backend", o->backend, backend_names(true))->envname("BACKEND")->capture_default_str();
  cmd->add_option("--target", o->target, "the real process when the entrypoint dispatches to it")->envname("APP_TARGET");
  cmd->add_option("--output-dir", o->output_dir, "where profiles go")->envname("PROFILE_DIR")->capture_default_str();
  cmd->add_option("--dormant", o->dormant, "true: load the profiler with recording off (memprofile start turns it on)")
      ->envname("DORMANT")
      ->capture_default_str();
  cmd->add_option("--max-profile-mb", o->max_profile_mb, "the profiles' disk budget (default: the launcher's)")
      ->envname("MAX_PROFILE_MB");
  cmd->add_option("--snapshot-every", o->snapshot_every, "a snapshot in every process of the tree this often (30s, 5m)")
      ->envname("SNAPSHOT_EVERY");
  cmd->add_option("--root", o->root, "the root to write into")->capture_default_str();
  cmd->add_option("--config", o->config, "the config path inside the root")->capture_default_str();
  cmd->callback([o, &exit_code] { exit_code = run_image_setup(*o); });
}

}  // namespace memprofile
