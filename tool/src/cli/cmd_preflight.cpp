#include "base/json_text.h"
#include "cli/cmd_preflight.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/unique_fd.h"
#include "verdict/findings.h"
#include "image/file_tree.h"
#include "source/load.h"
#include "verdict/preflight.h"
#include "verdict/profiler.h"
#include "verdict/report.h"

namespace memprofile {

using nlohmann::json;

namespace {

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

std::string human_size(uint64_t bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << bytes / 1e6 << " MB";
  return s.str();
}

// Runs the target with LD_TRACE_LOADED_OBJECTS=1 and LD_PRELOAD: the
// image's own ld.so maps everything, prints the list and exits before any
// of the program's code runs. The library must be on that list.
void trace_loader(PreflightResult& r) {
  if (!r.target || r.preload.empty()) return;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("--trace-loader: pipe: ") + strerror(errno));
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  std::vector<std::string> env_strings = {"LD_TRACE_LOADED_OBJECTS=1", "LD_PRELOAD=" + r.preload, "PATH=/usr/bin:/bin"};
  std::vector<char*> env;
  for (auto& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  std::string path = r.target->path;
  char* argv[] = {path.data(), nullptr};
  pid_t pid = fork();
  if (pid < 0) throw Error(std::string("--trace-loader: fork: ") + strerror(errno));
  if (pid == 0) {
    dup2(write_end.get(), STDOUT_FILENO);
    dup2(write_end.get(), STDERR_FILENO);
    execve(path.c_str(), argv, env.data());
    _exit(to_int(ExitCode::NotFound));
  }
  write_end.reset();
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(read_end.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (out.size() < (1u << 20)) out.append(buf, static_cast<size_t>(n));
  }
  read_end.reset();
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  char real[PATH_MAX];
  std::string want = realpath(r.preload.c_str(), real) ? real : r.preload;
  bool mapped = false;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ws(line);
    std::string first, arrow, third;
    ws >> first >> arrow >> third;
    std::string lib = arrow == "=>" ? third : first;
    char rl[PATH_MAX];
    if (lib == r.preload || lib == want || (realpath(lib.c_str(), rl) && want == rl)) mapped = true;
  }
  if (!mapped || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string first_line = out.substr(0, out.find('\n'));
    r.findings.insert(r.findings.begin(),
                      make_finding("PRELOAD_NOT_LOADED", "the image's loader, run on " + path + " with LD_PRELOAD=" +
                                                            r.preload + " in trace mode, did not map it (" +
                                                            (first_line.empty() ? "no output" : first_line) + ")"));
  } else {
    r.findings.push_back(make_finding("LOADER_TRACED", "the image's loader maps " + r.preload + " into " + path));
  }
}

// What the backend does with a child the program forks without exec (a
// prefork server's workers), in words: "" for a backend memprofile does not
// know.
std::string forked_children(const std::string& backend) {
  try {
    std::string why = forked_children_unrecorded(parse_backend(backend));
    return why.empty() ? "recorded, each serving memprofile start/stop/snapshot/status" : "not recorded: " + why;
  } catch (const Error&) {
    return "";
  }
}

json to_json(const LoadedImage& img, const PreflightResult& r) {
  json findings = json::array(), blocking = json::array(), dispatch = json::array();
  for (const auto& f : r.findings) {
    findings.push_back(to_json(f));
    if (f.severity == Severity::Error) blocking.push_back(f.code);
  }
  for (const auto& d : r.dispatch)
    dispatch.push_back({{"path", d.path}, {"named_as", d.named_as}, {"linkage", d.linkage}, {"profilable", d.profilable}});
  json j = {{"source", img.source},
            {"format", img.format},
            {"reference", img.reference.empty() ? json(nullptr) : json(img.reference)},
            {"platform", img.config.platform.str()},
            {"layers", img.layers},
            {"config",
             {{"entrypoint", img.config.entrypoint},
              {"cmd", img.config.cmd},
              {"env", img.config.env},
              {"user", img.config.user},
              {"working_dir", img.config.working_dir}}},
            {"verdict", r.ready() ? "READY" : "NOT PROFILABLE"},
            {"ready", r.ready()},
            {"argv", r.argv},
            {"program", r.program.empty() ? json(nullptr) : json(r.program)},
            {"scripts", r.scripts},
            {"target", r.target ? to_json(*r.target) : json(nullptr)},
            {"dispatch", dispatch},
            {"preload", r.preload.empty() ? json(nullptr)
                                          : json{{"path", r.preload},
                                                 {"backend", r.backend},
                                                 {"forked_children", forked_children(r.backend)}}},
            {"launcher", r.launcher ? json{{"path", r.launcher->path},
                                           {"backend", r.launcher->backend},
                                           {"preload", r.launcher->preload},
                                           {"output_dir", r.launcher->output_dir},
                                           {"target", r.launcher->target}}
                                    : json(nullptr)},
            {"findings", findings},
            {"blocking", blocking},
            {"anomalies", img.anomalies},
            {"notes", img.notes}};
  return j;
}

void print_report(std::ostream& out, const LoadedImage& img, const PreflightResult& r, bool color) {
  Style s{color};
  out << s.bold() << img.source << s.reset() << " (" << img.format << ", " << img.config.platform.str();
  if (img.layers) out << ", " << img.layers << " layer" << (img.layers == 1 ? "" : "s") << ", " << human_size(img.layer_bytes);
  out << ")\n";
  if (r.ready())
    out << s.green() << s.bold() << "READY" << s.reset() << ": a preload profiler will attach to "
        << (r.target ? r.target->path : r.program) << "\n";
  else
    out << s.red() << s.bold() << "NOT PROFILABLE" << s.reset() << "; fix, in this order:\n";
  int n = 0;
  for (const auto& f : r.findings)
    if (f.severity == Severity::Error) {
      out << "  " << ++n << ". " << s.bold() << f.code << s.reset() << ": " << f.message << "\n"
          << "     fix: " << f.fix << "\n";
    }
  out << "\nargv: ";
  for (size_t i = 0; i < r.argv.size(); ++i) out << (i ? " " : "") << r.argv[i];
  out << "\nuser: " << (img.config.user.empty() ? "root" : img.config.user)
      << ", workdir: " << (img.config.working_dir.empty() ? "/" : img.config.working_dir) << "\n";
  if (r.launcher) out << "launcher: " << r.launcher->path << " exec (output in " << r.launcher->output_dir << ")\n";
  for (const auto& sc : r.scripts) out << "script: " << sc << "\n";
  if (!r.preload.empty()) out << "preload: " << r.preload << " (" << r.backend << ")\n";
  if (!r.preload.empty() && !forked_children(r.backend).empty())
    out << "forked children: " << forked_children(r.backend) << "\n";
  for (const auto& d : r.dispatch)
    out << "dispatches to: " << d.path << " [" << d.linkage << ", " << (d.profilable ? "profilable" : "not profilable") << "]\n";
  for (const auto& f : r.findings)
    if (f.severity != Severity::Error) print_finding(out, f, color, "");
  if (r.target) {
    out << "\n";
    print_human(out, *r.target, color);
  }
  if (!img.anomalies.empty()) {
    out << "\n" << img.anomalies.size() << " archive entr" << (img.anomalies.size() == 1 ? "y" : "ies")
        << " handled specially:\n";
    for (size_t i = 0; i < img.anomalies.size() && i < 20; ++i) out << "  " << img.anomalies[i] << "\n";
  }
  for (const auto& note : img.notes) out << "note: " << note << "\n";
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
  cmd->add_flag("--json", opts->json, "print one JSON object per image instead of the report");
  cmd->add_flag("--trace-loader", opts->trace_loader,
                "with --rootfs /, inside the image: also run the image's own loader in trace mode "
                "(LD_TRACE_LOADED_OBJECTS=1 with LD_PRELOAD) and require it to map the preload library");
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

ExitCode run_preflight(const PreflightCliOptions& opts) {
  if (opts.image.empty() == opts.rootfs.empty()) throw Error("preflight: name an image (or -) or --rootfs DIR, not both");
  if (opts.rootfs.empty() && (!opts.entrypoint.empty() || !opts.cmd.empty() || !opts.env.empty() || !opts.user.empty() ||
                              !opts.workdir.empty()))
    throw Error("preflight: --entrypoint, --cmd, --env, --user and --workdir go with --rootfs (an image has its own config)");
  if (opts.trace_loader) {
    char real[PATH_MAX];
    if (opts.rootfs.empty() || !realpath(opts.rootfs.c_str(), real) || std::string(real) != "/")
      throw Error("preflight: --trace-loader runs the loader of the root it judges, so it goes with --rootfs / only "
                  "(inside the image, e.g. a Dockerfile RUN step)");
  }
  std::vector<LoadedImage> images;
  if (!opts.rootfs.empty()) {
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
    images.push_back(std::move(img));
  } else {
    ImageLoadOptions lo;
    lo.platform = opts.platform;
    lo.all_platforms = opts.all_platforms;
    lo.jobs = opts.jobs;
    lo.source.limits.max_tar_bytes = opts.max_layer_bytes;
    lo.source.network = &network_sources();
    lo.source.registry = {opts.creds, opts.authfile, opts.cert_dir, opts.tls_verify, opts.registries_conf, opts.registry_same_host};
    images = load_images(opts.image, lo);
  }
  PreflightOptions po{opts.target, opts.preload};
  bool color = !opts.json && isatty(STDOUT_FILENO);
  bool all_ready = true;
  for (size_t i = 0; i < images.size(); ++i) {
    PreflightResult r = preflight(images[i], po);
    if (opts.trace_loader && r.ready()) trace_loader(r);
    all_ready = all_ready && r.ready();
    if (opts.json) {
      std::cout << json_text(to_json(images[i], r)) << "\n";
    } else {
      if (i) std::cout << "\n";
      print_report(std::cout, images[i], r, color);
    }
  }
  return all_ready ? ExitCode::Ok : ExitCode::NotProfilable;
}

}  // namespace memprofile
