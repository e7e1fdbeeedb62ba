#include "runtime/exec_settings.h"

#include "base/error.h"
#include "runtime/launcher.h"

namespace memprofile {

const std::vector<ExecSetting>& exec_settings() {
  using K = SettingKind;
  using A = ExecArgs;
  using C = LauncherConfig;
  // Designated initializers would say which field each is; C++17 has
  // none, so each row sets its fields by name after the six it always has.
  auto row = [](const char* flag, const char* value, const char* key, const char* env, K kind, const char* help) {
    return ExecSetting{flag, value, key, env, kind, help};
  };
  static const std::vector<ExecSetting> rows = [&] {
    std::vector<ExecSetting> r;
    auto add = [&](ExecSetting s, auto&& where) {
      where(s);
      r.push_back(s);
    };
    add(row("--config", "FILE", nullptr, nullptr, K::Text, "launcher config file (default /etc/memprofile/exec.conf)"),
        [](ExecSetting& s) { s.arg_text = &A::config; });
    add(row("--backend", "NAME", "backend", "MEMPROFILE_BACKEND", K::Backend,
            "bytehound, jemalloc, heaptrack, memray (a Python interpreter), tcmalloc (gperftools' heap profiler linked "
            "into the program), or none: the control library alone (default: config, else bytehound)"),
        [](ExecSetting& s) { s.arg_text = &A::backend, s.text = &C::backend; });
    add(row("--preload", "PATH", "preload", "MEMPROFILE_PRELOAD", K::Text,
            "the preload library (default: the backend's path in memprofile images)"),
        [](ExecSetting& s) { s.arg_text = &A::preload, s.text = &C::preload; });
    add(row("--output-dir", "DIR", "output_dir", "MEMPROFILE_OUTPUT_DIR", K::Text,
            "where profiles go (default: config, else /var/memprofile)"),
        [](ExecSetting& s) { s.arg_text = &A::output_dir, s.text = &C::output_dir; });
    add(row("--target", "PATH", "target", "MEMPROFILE_TARGET", K::Text,
            "the real program, when PROGRAM is a dispatcher that execs it"),
        [](ExecSetting& s) { s.arg_text = &A::target, s.text = &C::target; });
    add(row("--min-free-mb", "N", "min_free_mb", "MEMPROFILE_MIN_FREE_MB", K::Mib,
            "free space the output filesystem must keep, at start and while recording (default 256)"),
        [](ExecSetting& s) { s.arg_number = &A::min_free_mb, s.number = &C::min_free_mb; });
    add(row("--max-profile-mb", "N", "max_profile_mb", "MEMPROFILE_MAX_PROFILE_MB", K::Mib,
            "disk budget of the profiles while the process runs (default 10% of the output filesystem, at most 1024)"),
        [](ExecSetting& s) { s.arg_number = &A::max_profile_mb, s.number = &C::max_profile_mb; });
    add(row("--snapshot-every", "DURATION", "snapshot_every", "MEMPROFILE_SNAPSHOT_EVERY", K::Duration,
            "while recording, write a snapshot in every process of the tree this often (30s, 5m, 1h; jemalloc)"),
        [](ExecSetting& s) { s.arg_number = &A::snapshot_every_ms, s.number = &C::snapshot_every_ms; });
    add(row("--dump-every-mb", "N", "dump_every_mb", "MEMPROFILE_DUMP_EVERY_MB", K::Interval,
            "jemalloc: the allocator's own dump each time N MiB more are allocated, a power of two, 0 for none "
            "(default 1024); the one way to a profile, besides the exit, where the control library cannot reach the "
            "allocator"),
        [](ExecSetting& s) { s.arg_number = &A::dump_every_mb, s.number = &C::dump_every_mb; });
    add(row("--dormant", nullptr, "dormant", "MEMPROFILE_DORMANT", K::Switch,
            "load the profiler with recording off; memprofile start/stop/snapshot drive it (or MEMPROFILE_DORMANT=1)"),
        [](ExecSetting& s) { s.arg_on = &A::dormant, s.on = &C::dormant; });
    // MEMPROFILE_STRICT is read apart (plan_launch): it holds even where
    // another setting is bad (what --strict is for), and only adds to the
    // file's strict.
    add(row("--strict", nullptr, "strict", nullptr, K::Switch,
            "exit 3 instead of running unprofiled when a check fails (or MEMPROFILE_STRICT=1)"),
        [](ExecSetting& s) { s.arg_on = &A::strict, s.on = &C::strict; });
    add(row("--serve", "ADDR:PORT", "serve", "MEMPROFILE_SERVE", K::Text,
            "also serve the tree's heap (pprof) and memory (Prometheus metrics) over HTTP, from a child of the "
            "program (memprofile serve); an address other than loopback needs --serve-token-file"),
        [](ExecSetting& s) { s.arg_text = &A::serve, s.text = &C::serve; });
    add(row("--serve-token-file", "FILE", "serve_token_file", "MEMPROFILE_SERVE_TOKEN_FILE", K::Text,
            "the bearer token --serve requires of every request"),
        [](ExecSetting& s) { s.arg_text = &A::serve_token_file, s.text = &C::serve_token_file; });
    add(row("--python-only", nullptr, nullptr, nullptr, K::Switch,
            "memray: record Python frames alone, without the native ones (native_traces off)"),
        [](ExecSetting& s) { s.arg_on = &A::python_only; });
    add(row("--log-format", "FORMAT", nullptr, nullptr, K::Format, "text or json"),
        [](ExecSetting& s) { s.arg_text = &A::log_format; });
    add(row("--from-config", nullptr, nullptr, nullptr, K::Switch,
            "run the config's entrypoint with ARGS, or with its cmd when none are given (images/ set this)"),
        [](ExecSetting& s) { s.arg_on = &A::from_config; });
    // Set by image-setup and the cluster helpers, not by hand: no flag.
    add(row(nullptr, nullptr, "ctl_library", "MEMPROFILE_CTL_LIBRARY", K::Text, "the control library"),
        [](ExecSetting& s) { s.text = &C::ctl_library; });
    add(row(nullptr, nullptr, "entrypoint", nullptr, K::Argv, "the app's own Entrypoint, for --from-config"),
        [](ExecSetting& s) { s.argv = &C::entrypoint; });
    add(row(nullptr, nullptr, "cmd", nullptr, K::Argv, "the app's own Cmd, for --from-config"),
        [](ExecSetting& s) { s.argv = &C::cmd; });
    return r;
  }();
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
