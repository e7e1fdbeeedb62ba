// `memprofile serve [--listen ADDR:PORT] [PID]`: the tree's heap as pprof
// and its memory as Prometheus metrics, over HTTP, for the scrapers fleets
// already run (serve/serve.h; docs/serve.md).
#include "cli/commands.h"
#include "serve/serve.h"

namespace memprofile {

void setup_serve(CLI::App& app, ExitCode& exit_code) {
  auto o = std::make_shared<ServeOptions>();
  // Shorter than a scraper's own timeout (Prometheus: 10 s): a member that
  // does not answer is left out, said, and the scrape still gets its answer.
  o->target.timeout = 5;
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the heap of a running tree as pprof (/debug/pprof/heap, /debug/pprof/allocs) and its memory as "
               "Prometheus metrics (/metrics), for Parca, Pyroscope/Alloy and Prometheus to scrape");
  cmd->add_option("pid", o->target.pid, "the tree's first process (default 1, the container's entrypoint)")
      ->each([o](const std::string&) { o->target.pid_given = true; });
  cmd->add_option("--listen", o->listen, "ADDR:PORT to listen on; an address other than loopback needs --token-file")
      ->capture_default_str();
  cmd->add_option("--token-file", o->token_file, "a file whose first line is the bearer token every request must carry");
  cmd->add_option("--output-dir", o->target.output_dir,
                  "where the control sockets are (default: what exec told the process, else the config's)");
  cmd->add_option("--config", o->target.config, "launcher config file")->capture_default_str();
  cmd->add_option("--timeout", o->target.timeout, "seconds each process has to answer")->capture_default_str();
  cmd->add_option("--min-interval", o->min_interval,
                  "seconds from one snapshot to the next; a scrape sooner gets the last one again")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--max-seconds", o->max_seconds, "the largest ?seconds=N a growth profile may ask")
      ->capture_default_str()
      ->check(CLI::Range(1u, 3600u));
  cmd->add_option("--max-memory", o->max_memory_mib,
                  "MiB of memory serve may hold as it reads a snapshot; a member whose files would pass it is left out, "
                  "said")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{32}, uint64_t{1} << 20));
  cmd->callback([o, &exit_code] {
    run_serve(*o);
    exit_code = ExitCode::Ok;
  });
}

}  // namespace memprofile
