// `memprofile collect [--out FILE|-]`: stream the profile files out of the
// container as a tar with a manifest of sizes and sha256 (archive/collect.h).
// `--verify FILE|-` checks such a tar on the receiving side.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>

#include "base/error.h"
#include "base/stream.h"
#include "base/unique_fd.h"
#include "cli/commands.h"
#include "archive/collect.h"
#include "archive/collected.h"
#include "runtime/launcher_config.h"

namespace memprofile {

namespace {

struct CollectOptions {
  std::string out = "-";
  std::string config = kDefaultConfigPath;
  std::string backend, output_dir;
  int pid = 1;
  double settle = 3, timeout = 90;
  bool suspend = false;
  std::string verify;
};

// Streams the archive (archive/collected.h): each entry's size and sha256
// are taken as it passes (nothing but the manifest is held), so an archive of
// any size verifies in constant memory.
ExitCode run_verify(const std::string& path) {
  UniqueFd file;  // unless it is stdin
  if (path != "-") {
    file = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!file) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  }
  FdReader in(file ? file.get() : STDIN_FILENO, path);
  CollectedArchive archive = read_collected(in, path, [](const std::string&, Reader&) {});
  // One line for each entry the lists disagree on, then exit 2.
  if (!archive.problems.empty()) {
    for (size_t i = 0; i + 1 < archive.problems.size(); ++i)
      std::cerr << "memprofile: " << path << ": " << archive.problems[i] << "\n";
    throw FileError(path, archive.problems.back());
  }
  int bad = 0;
  for (const auto& f : archive.files) {
    if (f.mismatch.empty()) {
      std::cout << "ok      " << f.name << " (" << f.size << " bytes)\n";
    } else {
      std::cout << "BAD     " << f.name << ": " << f.mismatch << "\n";
      ++bad;
    }
  }
  std::cout << (bad ? "archive does NOT match its manifest" : "archive matches its manifest") << "\n";
  return bad ? ExitCode::NotProfilable : ExitCode::Ok;
}

ExitCode run_collect(const CollectOptions& o) {
  if (!o.verify.empty()) return run_verify(o.verify);
  LauncherConfig cfg;
  load_launcher_config(o.config, cfg);
  apply_env_overrides(cfg);
  if (!o.backend.empty()) cfg.backend = o.backend;
  if (!o.output_dir.empty()) cfg.output_dir = o.output_dir;
  CollectRequest req;
  req.backend = parse_backend(cfg.backend);
  req.output_dir = cfg.output_dir;
  req.out = o.out;
  req.settle = o.settle;
  req.timeout = o.timeout;
  req.max_bytes = profile_budget_bytes(cfg);
  if (o.suspend && req.backend == Backend::Bytehound) req.suspend_pid = o.pid;
  if (o.out == "-" && isatty(STDOUT_FILENO))
    throw Error("collect writes a tar archive: redirect it (kubectl exec POD -- memprofile collect > profile.tar)");
  size_t n = collect_profiles(req, [](const std::string& line) { std::cerr << "memprofile: " << line << "\n"; });
  std::cerr << "memprofile: collected " << n << " file(s) from " << cfg.output_dir << "\n";
  return ExitCode::Ok;
}

}  // namespace

void setup_collect(CLI::App& app, ExitCode& exit_code) {
  auto o = std::make_shared<CollectOptions>();
  CLI::App* cmd = app.add_subcommand("collect", "Stream the profile files out as a tar with a verified manifest");
  cmd->add_option("--out", o->out, "where to write the tar (- for stdout)")->capture_default_str();
  cmd->add_option("--config", o->config, "launcher config file")->capture_default_str();
  cmd->add_option("--backend", o->backend, backend_names());
  cmd->add_option("--output-dir", o->output_dir, "where the profiles are written");
  cmd->add_option("--pid", o->pid, "the profiled process, for --suspend")->capture_default_str();
  cmd->add_option("--settle", o->settle, "seconds the files must stop growing before the copy")->capture_default_str();
  cmd->add_option("--timeout", o->timeout, "most seconds to wait for them to settle")->capture_default_str();
  cmd->add_flag("--suspend", o->suspend, "bytehound: pause tracking (SIGUSR1) around the copy, resume after");
  cmd->add_option("--verify", o->verify, "check a collected tar (or - for stdin) against its manifest");
  cmd->callback([o, &exit_code] { exit_code = run_collect(*o); });
}

}  // namespace memprofile
