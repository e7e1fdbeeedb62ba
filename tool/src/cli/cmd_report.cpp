// `memprofile report PROFILE... [--base EARLIER] (--image IMAGE | --rootfs DIR) [--top N] [--json]`:
// from heap profiles to the code that holds the memory, and to what grew.
// The pipeline is profile/report.h; this file parses and prints.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "base/error.h"
#include "base/json_text.h"
#include "base/memory_ceiling.h"
#include "base/sink.h"
#include "cli/commands.h"
#include "cli/logger.h"
#include "profile/report.h"

namespace memprofile {

namespace {

ExitCode run_report(const ReportRequest& o) {
  std::unique_ptr<Report> r = make_report(o);  // its pictures are in their files now
  StreamSink out(std::cout, "standard output");
  out.write(o.json ? json_text(report_json(*r, o)) + "\n" : report_text(*r, o));
  return ExitCode::Ok;
}

}  // namespace

void setup_report(CLI::App& app, ExitCode& exit_code) {
  auto o = std::make_shared<ReportRequest>();
  CLI::App* cmd = app.add_subcommand(
      "report", "From heap profiles to the code holding the memory: the largest allocation sites, and with several "
                "dumps (or --base) the sites that grew and the leak suspects");
  cmd->add_option("profiles", o->profiles, "jemalloc .heap dumps, or directories of them (memprofile collect's output)")
      ->required();
  cmd->add_option("--base", o->base, "an earlier profile to measure growth from (a jemalloc dump; a heaptrack trace or bytehound .dat: its end)");
  auto* image = cmd->add_option("--image", o->image, "the image the profile came from (archive, OCI layout, -, docker://REF, "
                                                      "docker-daemon:NAME): symbols come from its files");
  auto* rootfs = cmd->add_option("--rootfs", o->rootfs, "or the image's root filesystem, as a directory");
  cmd->add_option("--debug-dir", o->debug_dir,
                  "a directory of debug files, searched after the image's own as /usr/lib/debug is "
                  "(.build-id/XX/REST.debug, the .gnu_debuglink name)")
      ->check(CLI::ExistingDirectory);
  image->excludes(rootfs);
  cmd->add_option("--platform", o->platform, "--image: the platform of a multi-platform image (os/arch[/variant])");
  cmd->add_option("--top", o->top, "sites shown per view")->capture_default_str()->check(CLI::Range(1, 10000));
  cmd->add_flag("--json", o->json, "the same content as JSON");
  cmd->add_option("--flamegraph", o->flamegraph, "also write a flame graph SVG of bytes in use (of growth, with --base)");
  cmd->add_option("--trend", o->trend, "also write an SVG of bytes in use over the snapshots for the top sites");
  cmd->add_option("--pid", o->pid, "of the profiles of several processes, this one alone")->check(CLI::PositiveNumber);
  cmd->add_flag("--merge", o->merge, "sum the processes of one program (prefork workers) into one view per program");
  cmd->add_option("--pprof", o->pprof, "also write the last snapshot as a gzipped pprof profile (go tool pprof, "
                                       "Pyroscope, Parca)");
  auto max_memory = std::make_shared<uint64_t>(kReportMemoryCeiling >> 20);
  cmd->add_option("--max-memory", *max_memory,
                  "MiB of memory report may hold as it reads and symbolises (past it: one line naming the file, exit 2)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{32}, uint64_t{1} << 20));
  o->network = &network_sources();
  cmd->callback([o, max_memory, &exit_code] {
    set_memory_ceiling(*max_memory << 20, "--max-memory");
    o->verbose = log_verbose();
    exit_code = run_report(*o);
  });
}

}  // namespace memprofile
