// `memprofile attached [PID]`: is the profiler really in the process, and is
// it recording? Replaces the numaflow guide's three manual commands (grep
// /proc/1/maps, ldd, ls -la on the output directory). The check is
// runtime/attach.cpp; this file parses and prints.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/json_text.h"
#include "cli/commands.h"
#include "runtime/attach.h"

namespace memprofile {

using nlohmann::json;

namespace {

json to_json(const Attachment& a) {
  json files = json::array();
  for (const auto& f : a.profiles) files.push_back({{"path", f.path}, {"size", f.size}, {"grew", f.grew}});
  return {{"pid", a.pid},
          {"exe", a.exe},
          {"linkage", a.linkage},
          {"backend", to_string(a.backend)},
          {"backend_from", a.backend_from},
          {"output_dir", a.output_dir},
          {"output_dir_from", a.output_dir_from},
          {"mapped", !a.library.empty()},
          {"library", a.library.empty() ? json(nullptr) : json(a.library)},
          {"profiles", files},
          {"output_dir_bytes", a.output_dir_bytes},
          {"growing", a.growing},
          {"recording", a.recording ? json(*a.recording) : json(nullptr)},
          {"stopped_reason", a.stopped_reason},
          {"control_error", a.control_error.empty() ? json(nullptr) : json(a.control_error)},
          {"window_seconds", a.window},
          {"attached", a.attached}};
}

void print_attachment(std::ostream& out, const Attachment& a) {
  std::string proc = "/proc/" + std::to_string(a.pid);
  out << "pid " << a.pid << " (" << a.exe << ", " << a.linkage << ")\n";
  out << "  backend " << to_string(a.backend) << " (from " << a.backend_from << "), profiles in " << a.output_dir
      << " (from " << a.output_dir_from << ")\n";
  out << "  " << (a.backend == Backend::None ? std::string("control") : std::string(to_string(a.backend))) << " library mapped: "
      << (a.library.empty() ? "no (not in " + proc + "/maps)" : "yes (" + a.library + ")") << "\n";
  if (a.profiles.empty()) out << "  profile: none yet in " << a.output_dir << "\n";
  for (const auto& f : a.profiles)
    out << "  profile: " << f.path << " " << f.size << " bytes, "
        << (f.grew ? "growing (+" + std::to_string(f.grew) + " in the window)" : std::string("not growing in the window"))
        << "\n";
  if (a.recording)
    out << "  recording: "
        << (*a.recording               ? std::string("on")
            : a.stopped_reason.empty() ? std::string("off (dormant or stopped: memprofile start turns it on)")
                                       : "off (stopped: " + a.stopped_reason + ")")
        << "\n";
  else if (!a.control_error.empty())
    out << "  recording: unknown (the control socket did not answer: " << a.control_error << ")\n";
  // heaptrack and bytehound open their file at the process's first malloc
  // they see: mapped and none means they never saw one.
  if ((a.backend == Backend::Heaptrack || a.backend == Backend::Bytehound) && a.attached && a.profiles.empty())
    out << "  note: " << to_string(a.backend) << " writes its file from the first malloc it sees, and there is none: "
        << "this program's heap does not go through the malloc it interposes (an allocator of its own; memprofile "
        << "check --preload LIB PROGRAM says which), so the profile will stay empty\n";
  if (a.backend == Backend::Bytehound && a.attached && !a.growing)
    out << "  note: bytehound flushes about every 30 s; a quiet window is normal\n";
  out << (a.attached ? "ATTACHED" : "NOT ATTACHED") << "\n";
}

ExitCode run_attached(const AttachRequest& o, bool json_out) {
  Attachment a = check_attached(o);
  if (json_out)
    std::cout << json_text(to_json(a)) << "\n";
  else
    print_attachment(std::cout, a);
  return a.attached ? ExitCode::Ok : ExitCode::NotProfilable;
}

}  // namespace

void setup_attached(CLI::App& app, ExitCode& exit_code) {
  auto o = std::make_shared<AttachRequest>();
  auto json_out = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("attached", "Say whether the profiler is loaded in a process and recording");
  cmd->add_option("pid", o->pid, "process to inspect (default 1, the container's entrypoint)");
  cmd->add_option("--config", o->config, "launcher config file")->capture_default_str();
  cmd->add_option("--backend", o->backend, backend_names());
  cmd->add_option("--preload", o->preload, "the preload library's path");
  cmd->add_option("--output-dir", o->output_dir, "where the profiles are written");
  cmd->add_option("--window", o->window, "seconds to watch the profile grow")->capture_default_str();
  cmd->add_flag("--json", *json_out, "print one JSON object");
  cmd->callback([o, json_out, &exit_code] { exit_code = run_attached(*o, *json_out); });
}

}  // namespace memprofile
