#include "runtime/exec_settings.h"

#include "base/error.h"
#include "runtime/launcher.h"

namespace memprofile {

namespace {
// One row under construction: the six fields every row has, then where its
// values go, by the type of the field (a flag's into ExecArgs, the file's
// and the environment's into LauncherConfig).
struct Row : ExecSetting {
  Row(const char* flag, const char* value, const char* key, const char* env, SettingKind kind, const char* help)
      : ExecSetting{flag, value, key, env, kind, help} {}
  Row& to(std::string ExecArgs::*a, std::string LauncherConfig::*c = nullptr) { return arg_text = a, text = c, *this; }
  Row& to(std::optional<uint64_t> ExecArgs::*a, uint64_t LauncherConfig::*c) { return arg_number = a, number = c, *this; }
  Row& to(bool ExecArgs::*a, bool LauncherConfig::*c = nullptr) { return arg_on = a, on = c, *this; }
  Row& to(std::string LauncherConfig::*c) { return text = c, *this; }
  Row& to(std::vector<std::string> LauncherConfig::*c) { return argv = c, *this; }
};
}  // namespace

const std::vector<ExecSetting>& exec_settings() {
  using K = SettingKind;
  using A = ExecArgs;
  using C = LauncherConfig;
  using row = Row;
  static const std::vector<ExecSetting> rows = {
      row("--config", "FILE", nullptr, nullptr, K::Text, "launcher config file (default /etc/memprofile/exec.conf)")
          .to(&A::config),
      row("--backend", "NAME", "backend", "MEMPROFILE_BACKEND", K::Backend,
          "bytehound, jemalloc, heaptrack, memray (a Python interpreter), tcmalloc (gperftools' heap profiler linked "
          "into the program), or none: the control library alone (default: config, else bytehound)")
          .to(&A::backend, &C::backend),
      row("--preload", "PATH", "preload", "MEMPROFILE_PRELOAD", K::Text,
          "the preload library (default: the backend's path in memprofile images)").to(&A::preload, &C::preload),
      row("--output-dir", "DIR", "output_dir", "MEMPROFILE_OUTPUT_DIR", K::Text,
          "where profiles go (default: config, else /var/memprofile)").to(&A::output_dir, &C::output_dir),
      row("--target", "PATH", "target", "MEMPROFILE_TARGET", K::Text,
          "the real program, when PROGRAM is a dispatcher that execs it").to(&A::target, &C::target),
      row("--min-free-mb", "N", "min_free_mb", "MEMPROFILE_MIN_FREE_MB", K::Mib,
          "free space the output filesystem must keep, at start and while recording (default 256)")
          .to(&A::min_free_mb, &C::min_free_mb),
      row("--max-profile-mb", "N", "max_profile_mb", "MEMPROFILE_MAX_PROFILE_MB", K::Mib,
          "disk budget of the profiles while the process runs (default 10% of the output filesystem, at most 1024)")
          .to(&A::max_profile_mb, &C::max_profile_mb),
      row("--snapshot-every", "DURATION", "snapshot_every", "MEMPROFILE_SNAPSHOT_EVERY", K::Duration,
          "while recording, write a snapshot in every process of the tree this often (30s, 5m, 1h; jemalloc)")
          .to(&A::snapshot_every_ms, &C::snapshot_every_ms),
      row("--dump-every-mb", "N", "dump_every_mb", "MEMPROFILE_DUMP_EVERY_MB", K::Interval,
          "jemalloc: the allocator's own dump each time N MiB more are allocated, a power of two, 0 for none "
          "(default 1024); the one way to a profile, besides the exit, where the control library cannot reach the "
          "allocator").to(&A::dump_every_mb, &C::dump_every_mb),
      row("--dormant", nullptr, "dormant", "MEMPROFILE_DORMANT", K::Switch,
          "load the profiler with recording off; memprofile start/stop/snapshot drive it (or MEMPROFILE_DORMANT=1)")
          .to(&A::dormant, &C::dormant),
      // MEMPROFILE_STRICT is read apart (plan_launch): it holds even where
      // another setting is bad (what --strict is for), and only adds to the
      // file's strict.
      row("--strict", nullptr, "strict", nullptr, K::Switch,
          "exit 3 instead of running unprofiled when a check fails (or MEMPROFILE_STRICT=1)")
          .to(&A::strict, &C::strict),
      row("--serve", "ADDR:PORT", "serve", "MEMPROFILE_SERVE", K::Text,
          "also serve the tree's heap (pprof) and memory (Prometheus metrics) over HTTP, from a child of the "
          "program (memprofile serve); an address other than loopback needs --serve-token-file")
          .to(&A::serve, &C::serve),
      row("--serve-token-file", "FILE", "serve_token_file", "MEMPROFILE_SERVE_TOKEN_FILE", K::Text,
          "the bearer token --serve requires of every request").to(&A::serve_token_file, &C::serve_token_file),
      row("--python-only", nullptr, nullptr, nullptr, K::Switch,
          "memray: record Python frames alone, without the native ones (native_traces off)").to(&A::python_only),
      row("--log-format", "FORMAT", nullptr, nullptr, K::Format, "text or json").to(&A::log_format),
      row("--from-config", nullptr, nullptr, nullptr, K::Switch,
          "run the config's entrypoint with ARGS, or with its cmd when none are given (images/ set this)")
          .to(&A::from_config),
      // Set by image-setup and the cluster helpers, not by hand: no flag.
      row(nullptr, nullptr, "ctl_library", "MEMPROFILE_CTL_LIBRARY", K::Text, "the control library")
          .to(&C::ctl_library),
      row(nullptr, nullptr, "entrypoint", nullptr, K::Argv, "the app's own Entrypoint, for --from-config")
          .to(&C::entrypoint),
      row(nullptr, nullptr, "cmd", nullptr, K::Argv, "the app's own Cmd, for --from-config").to(&C::cmd),
  };
  return rows;
}

SettingValue check_setting_value(const ExecSetting& s, const std::string& value) {
  SettingValue out;
  switch (s.kind) {
    case SettingKind::Backend:
      if (value.empty()) break;  // the default, as when not given
      try {
        parse_backend(value);
      } catch (const Error& e) {
        out.error = e.what();
      }
      break;
    case SettingKind::Mib:
    case SettingKind::Interval:
      if (value.empty() || value.size() > 19 || value.find_first_not_of("0123456789") != std::string::npos) {
        out.error = "is not a number of MiB";
        break;
      }
      out.number = std::stoull(value);
      // jemalloc dumps every 2^lg_prof_interval bytes; up to 1 TiB.
      if (s.kind == SettingKind::Interval && (out.number & (out.number - 1) || out.number > (uint64_t{1} << 20)))
        out.error = "is not 0 or a power of two of MiB up to 1048576 (jemalloc dumps every 2^N bytes: 512, 1024, 4096)";
      break;
    case SettingKind::Duration:
      if (auto ms = parse_duration_ms(value)) out.number = *ms;
      else out.error = "is not a duration of 1s to 7d (30s, 5m, 1h, or seconds)";
      break;
    case SettingKind::Format:
      if (value != "text" && value != "json") out.error = "is not text or json";
      break;
    case SettingKind::Text:
    case SettingKind::Switch:
    case SettingKind::Argv:
      break;
  }
  return out;
}

std::string setting_error(const std::string& name, const std::string& value, const std::string& error, bool flag) {
  const bool sentence = error.rfind("is ", 0) != 0;
  if (flag) return name + " " + value + (sentence ? ": " : " ") + error;
  return name + (sentence ? ": " : " ") + error + (sentence ? "" : ": '" + value + "'");
}

}  // namespace memprofile
