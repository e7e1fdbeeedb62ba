// `memprofile preflight`: parse, load the images, judge each
// (verdict/preflight.cpp), print (verdict/render.cpp).
#include "cli/commands.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/json_text.h"
#include "image/file_tree.h"
#include "source/load.h"
#include "verdict/loader_trace.h"
#include "verdict/preflight.h"
#include "verdict/render.h"

namespace memprofile {

using nlohmann::json;

namespace {

struct PreflightCliOptions {
  std::string image;  // archive, OCI layout directory, "-", or docker://REF
  std::string rootfs;
  std::string entrypoint, cmd;  // for --rootfs: a JSON array or whitespace-separated words
  std::vector<std::string> env;
  std::string user, workdir;
  std::string platform;
  bool all_platforms = false;
  std::string target, preload, backend;
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


std::vector<std::string> words(const std::string& s, const char* flag) {
  if (s.empty()) return {};
  if (s[0] == '[') {
    try {
      return json::parse(s).get<std::vector<std::string>>();
    } catch (const json::exception&) {
      throw Error(std::string(flag) + " is not a JSON array of strings: " + s);
    }
  }
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The flags that only go together, refused before anything is read.
void check_flags(const PreflightCliOptions& opts) {
  if (opts.image.empty() == opts.rootfs.empty()) throw Error("preflight: name an image (or -) or --rootfs DIR, not both");
  if (opts.rootfs.empty() && (!opts.entrypoint.empty() || !opts.cmd.empty() || !opts.env.empty() || !opts.user.empty() ||
                              !opts.workdir.empty()))
    throw Error("preflight: --entrypoint, --cmd, --env, --user and --workdir go with --rootfs (an image has its own config)");
  if (!opts.backend.empty() && opts.backend != "memray")
    throw Error("preflight: --backend takes memray (a preload profiler is judged from LD_PRELOAD, the launcher or "
                "--preload), not '" + opts.backend + "'");
  if (opts.backend == "memray" && !opts.preload.empty())
    throw Error("preflight: --backend memray loads no preload library: --preload does not go with it");
  if (opts.trace_loader) {
    char real[PATH_MAX];
    if (opts.rootfs.empty() || !realpath(opts.rootfs.c_str(), real) || std::string(real) != "/")
      throw Error("preflight: --trace-loader runs the loader of the root it judges, so it goes with --rootfs / only "
                  "(inside the image, e.g. a Dockerfile RUN step)");
  }
}

// --rootfs DIR: a plain directory, its config from the flags.
LoadedImage rootfs_image(const PreflightCliOptions& opts) {
  LoadedImage img;
  img.source = opts.rootfs;
  img.format = "rootfs";
  img.tree = std::make_shared<HostTree>(opts.rootfs);
  img.config.entrypoint = words(opts.entrypoint, "--entrypoint");
  img.config.cmd = words(opts.cmd, "--cmd");
  img.config.env = opts.env;
  img.config.user = opts.user;
  img.config.working_dir = opts.workdir;
  img.config.platform = {"linux", "", ""};
  return img;
}

std::vector<LoadedImage> images_to_judge(const PreflightCliOptions& opts) {
  if (!opts.rootfs.empty()) return {rootfs_image(opts)};
  ImageLoadOptions lo;
  lo.platform = opts.platform;
  lo.all_platforms = opts.all_platforms;
  lo.jobs = opts.jobs;
  lo.source.limits.max_tar_bytes = opts.max_layer_bytes;
  lo.source.network = &network_sources();
  lo.source.registry = {opts.creds, opts.authfile, opts.cert_dir, opts.tls_verify, opts.registries_conf,
                        opts.registry_same_host};
  return load_images(opts.image, lo);
}


ExitCode run_preflight(const PreflightCliOptions& opts) {
  check_flags(opts);
  std::vector<LoadedImage> images = images_to_judge(opts);
  PreflightOptions po{opts.target, opts.preload, opts.backend};
  bool color = !opts.json && isatty(STDOUT_FILENO);
  bool all_ready = true;
  for (size_t i = 0; i < images.size(); ++i) {
    PreflightResult r = preflight(images[i], po);
    if (opts.trace_loader && r.ready()) r.backend == "memray" ? trace_import(r) : trace_loader(r);
    all_ready = all_ready && r.ready();
    if (opts.json) {
      std::cout << json_text(to_json(images[i], r)) << "\n";
    } else {
      if (i) std::cout << "\n";
      print_preflight(std::cout, images[i], r, color);
    }
  }
  return all_ready ? ExitCode::Ok : ExitCode::NotProfilable;
}

}  // namespace

void setup_preflight(CLI::App& app, ExitCode& exit_code) {
  auto opts = std::make_shared<PreflightCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "preflight", "Say, without running it, whether a preload heap profiler will attach to an "
                   "image's process, and exactly what to fix");
  cmd->add_option("image", opts->image,
                  "docker save archive, OCI archive, OCI layout directory, - for standard input, or "
                  "docker://[HOST[:PORT]/]REPO[:TAG|@DIGEST] for a registry, docker-daemon:NAME[:TAG] for the "
                  "Docker daemon's image (DOCKER_HOST, else the docker context)");
  cmd->add_option("--rootfs", opts->rootfs, "judge a plain root filesystem directory (config from the flags below)");
  cmd->add_option("--entrypoint", opts->entrypoint, "with --rootfs: the entrypoint (JSON array or words)");
  cmd->add_option("--cmd", opts->cmd, "with --rootfs: the command (JSON array or words)");
  cmd->add_option("--env", opts->env, "with --rootfs: an environment variable KEY=VALUE (repeatable)");
  cmd->add_option("--user", opts->user, "with --rootfs: the user the program runs as");
  cmd->add_option("--workdir", opts->workdir, "with --rootfs: the working directory");
  cmd->add_option("--platform", opts->platform, "pick one platform of a multi-platform image, e.g. linux/arm64");
  cmd->add_flag("--all-platforms", opts->all_platforms, "check every platform of a multi-platform image");
  cmd->add_option("--target", opts->target, "the process to judge, when the entrypoint dispatches to another program");
  cmd->add_option("--preload", opts->preload, "the preload library (a path in the image) instead of LD_PRELOAD from its env");
  cmd->add_option("--backend", opts->backend,
                  "memray: judge memray in the target's CPython interpreter (importable from its sys.path, the "
                  "extension's Python, architecture and libraries, memprofile's bootstrap) instead of a preload");
  cmd->add_flag("--json", opts->json, "print one JSON object per image instead of the report");
  cmd->add_flag("--trace-loader", opts->trace_loader,
                "with --rootfs /, inside the image: also run the image's own loader in trace mode "
                "(LD_TRACE_LOADED_OBJECTS=1 with LD_PRELOAD) and require it to map the preload library; with memray, "
                "run the image's interpreter and require it to import memray's extension");
  cmd->add_option("-j,--jobs", opts->jobs, "layers decoded in parallel (default: one per core)");
  cmd->add_option("--max-layer-bytes", opts->max_layer_bytes, "refuse a layer that decompresses to more than this");
  cmd->add_option("--creds", opts->creds, "docker://: USER[:PASSWORD] for the registry (else the auth files)");
  cmd->add_option("--authfile", opts->authfile, "docker://: the auth file (else REGISTRY_AUTH_FILE, "
                                                "$XDG_RUNTIME_DIR/containers/auth.json, ~/.docker/config.json)");
  cmd->add_option("--cert-dir", opts->cert_dir, "docker://: CAs (*.crt) and client certificate (*.cert, *.key) for TLS");
  cmd->add_option("--tls-verify", opts->tls_verify,
                  "docker://: verify the registry's certificate (default true); false also allows plain HTTP");
  cmd->add_flag("--registry-same-host", opts->registry_same_host,
                "docker://: refuse a token realm or a redirect to any host but the registry's own (a CI gate on "
                "untrusted references: no request to a private or link-local address a registry names)");
  cmd->add_option("--registries-conf", opts->registries_conf,
                  "docker://: the containers-registries.conf(5) file (else CONTAINERS_REGISTRIES_CONF, "
                  "~/.config/containers/registries.conf, /etc/containers/registries.conf)");
  cmd->callback([opts, &exit_code] { exit_code = run_preflight(*opts); });
}

}  // namespace memprofile
