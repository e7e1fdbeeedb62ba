// `memprofile preflight IMAGE|-|docker://REF [--platform P|--all-platforms] [--target PATH] [--preload PATH] [--json]`
// `memprofile preflight --rootfs DIR --entrypoint '...' [--cmd ...] [--env K=V]... [--user U] [--workdir D]`
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "base/error.h"

namespace memprofile {

struct PreflightCliOptions {
  std::string image;  // archive, OCI layout directory, "-", or docker://REF
  std::string rootfs;
  std::string entrypoint, cmd;  // for --rootfs: a JSON array or whitespace-separated words
  std::vector<std::string> env;
  std::string user, workdir;
  std::string platform;
  bool all_platforms = false;
  std::string target, preload;
  bool json = false;
  bool trace_loader = false;  // --rootfs / only: run the image's own loader in trace mode
  unsigned jobs = 0;
  uint64_t max_layer_bytes = 64ull << 30;
  // docker://REF: --creds, --authfile, --cert-dir, --tls-verify (as skopeo's)
  std::string creds, authfile, cert_dir;
  bool tls_verify = true;
  std::string registries_conf;
  bool registry_same_host = false;
};

void setup_preflight(CLI::App& app, ExitCode& exit_code);
ExitCode run_preflight(const PreflightCliOptions& opts);

}  // namespace memprofile
