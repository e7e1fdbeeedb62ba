#include "verdict/render.h"

#include <sys/stat.h>

#include <iomanip>
#include <sstream>

#include "runtime/backend.h"

namespace memprofile {

using nlohmann::json;

namespace {

std::string human_size(uint64_t bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << bytes / 1e6 << " MB";
  return s.str();
}

// What the backend does with a child the program forks without exec (a
// prefork server's workers), in words: "" for a backend memprofile does not
// know.
std::string forked_children(const std::string& backend) {
  if (backend == "memray")  // the bootstrap serves control from each interpreter, not the control library
    return "recorded, each in a capture of its own (memray's follow_fork), each serving memprofile "
           "start/stop/snapshot/status from memprofile's bootstrap";
  try {
    std::string why = forked_children_unrecorded(parse_backend(backend));
    return why.empty() ? "recorded, each serving memprofile start/stop/snapshot/status" : "not recorded: " + why;
  } catch (const Error&) {
    return "";
  }
}

}  // namespace

json to_json(const PythonFacts& py) {
  json debian = nullptr;
  if (py.debian) {
    json installed = json::array();
    for (const auto& p : py.debian->installed)
      installed.push_back({{"package", p.name}, {"version", p.version}, {"architecture", p.architecture},
                           {"multi_arch", p.multi_arch}, {"provides", p.provides}, {"stanza", p.stanza}});
    const DebianPackage* own = py.debian_package.empty() ? nullptr : py.debian->find(py.debian_package);
    debian = {{"id", py.debian->id},
              {"codename", py.debian->codename},
              {"complete", py.debian->complete},
              {"python_package", own ? json(own->name) : json(nullptr)},
              {"python_version", own ? json(own->version) : json(nullptr)},
              {"installed", installed}};
  }
  return {{"interpreter", py.interpreter},
          {"version", py.version},
          {"invoked", py.invoked},
          {"isolated_venv", py.isolated_venv},
          {"site_packages", py.install.site_packages},
          {"include_dir", py.install.include_dir},
          {"headers", py.install.headers},
          {"debian", debian}};
}

json to_json(const Finding& f) {
  return {{"code", f.code}, {"severity", to_string(f.severity)}, {"message", f.message}, {"fix", f.fix}};
}

json to_json(const FileVerdict& r) {
  const ElfInfo& e = *r.elf;
  auto or_null = [](const std::string& s) -> json { return s.empty() ? json(nullptr) : json(s); };
  json j;
  j["path"] = r.path;
  j["arch"] = machine_name(e.machine);
  j["class"] = e.elf_class;
  j["endianness"] = e.little_endian ? "little" : "big";
  j["type"] = elf_type_name(e.type);
  j["linkage"] = to_string(e.linkage);
  j["interpreter"] = or_null(e.interpreter);
  j["libc"] = to_string(e.libc());
  j["go"] = e.go ? json{{"version", or_null(e.go_version)}} : json(nullptr);
  j["soname"] = or_null(e.soname);
  j["needed"] = e.needed;
  j["rpath"] = or_null(e.rpath);
  j["runpath"] = or_null(e.runpath);
  j["glibc_required"] = or_null(e.glibc_required());
  j["setuid"] = (r.mode & S_ISUID) != 0;
  j["setgid"] = (r.mode & S_ISGID) != 0;
  j["file_capabilities"] = r.file_caps;
  j["defines"] = {{"malloc", e.defines_malloc}, {"free", e.defines_free}};
  if (r.root_checked && r.load) {
    json libs = json::array();
    for (const auto& o : r.load->objects) {
      json l = {{"name", o.name},
                {"path", or_null(o.path)},
                {"via", or_null(o.via)},
                {"requested_by", o.requested_by},
                {"preload", o.preload}};
      if (!o.skipped.empty()) l["skipped"] = o.skipped;
      libs.push_back(std::move(l));
    }
    std::string need = e.glibc_required();
    j["root"] = {{"interpreter_found", e.interpreter.empty() ? json(nullptr) : json(!r.load->interpreter.empty())},
                 {"interpreter_path", or_null(r.load->interpreter)},
                 {"glibc_available", or_null(r.root_glibc)},
                 {"glibc_satisfied", need.empty() ? json(nullptr)
                                                  : json(!r.root_glibc.empty() &&
                                                         compare_glibc_versions(need, r.root_glibc) <= 0)},
                 {"libraries", std::move(libs)}};
  }
  j["profilable"] = r.profilable();
  j["heap_coverage_backend"] = or_null(r.coverage_backend);
  json findings = json::array();
  for (const auto& f : r.findings) findings.push_back(to_json(f));
  j["findings"] = std::move(findings);
  return j;
}

void print_finding(std::ostream& out, const Finding& f, bool color, const char* indent) {
  Style s{color};
  const char* c = f.severity == Severity::Error ? s.red() : f.severity == Severity::Warning ? s.yellow() : s.dim();
  out << indent << c << to_string(f.severity) << s.reset() << " " << s.bold() << f.code << s.reset() << ": "
      << f.message << "\n"
      << indent << "  fix: " << f.fix << "\n";
}

void print_human(std::ostream& out, const FileVerdict& r, bool color) {
  Style s{color};
  const ElfInfo& e = *r.elf;
  out << s.bold() << r.path << s.reset() << "\n";
  out << "  " << machine_name(e.machine) << " ELF" << e.elf_class << (e.little_endian ? " LSB " : " MSB ")
      << elf_type_name(e.type) << ", " << to_string(e.linkage);
  if (!e.interpreter.empty()) out << ", interpreter " << e.interpreter;
  out << "\n  libc " << to_string(e.libc());
  if (std::string g = e.glibc_required(); !g.empty()) out << ", requires " << g;
  if (e.go) out << ", Go" << (e.go_version.empty() ? "" : " " + e.go_version);
  out << "\n";
  if (!e.needed.empty()) {
    out << "  needs";
    for (size_t i = 0; i < e.needed.size(); ++i) out << (i ? ", " : " ") << e.needed[i];
    out << "\n";
  }
  if (!e.rpath.empty()) out << "  rpath " << e.rpath << "\n";
  if (!e.runpath.empty()) out << "  runpath " << e.runpath << "\n";
  if (r.root_checked && r.load) {
    for (const auto& o : r.load->objects) {
      out << "  " << (o.preload ? "preload " : "") << o.name << " => ";
      if (o.path.empty())
        out << s.red() << "not found" << s.reset();
      else
        out << o.path << s.dim() << " (" << o.via << ")" << s.reset();
      out << "\n";
    }
  }
  for (const auto& f : r.findings) print_finding(out, f, color);
  if (!r.coverage_backend.empty())
    out << "  heap coverage judged for the default backend, " << r.coverage_backend
        << " (--preload LIB judges another's)\n";
  out << "  profilable: " << (r.profilable() ? std::string(s.green()) + "yes" : std::string(s.red()) + "no") << s.reset()
      << "\n";
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
            {"python", r.python ? to_json(*r.python) : json(nullptr)},
            {"findings", findings},
            {"blocking", blocking},
            {"anomalies", img.anomalies},
            {"notes", img.notes}};
  return j;
}

void print_preflight(std::ostream& out, const LoadedImage& img, const PreflightResult& r, bool color) {
  Style s{color};
  out << s.bold() << img.source << s.reset() << " (" << img.format << ", " << img.config.platform.str();
  if (img.layers) out << ", " << img.layers << " layer" << (img.layers == 1 ? "" : "s") << ", " << human_size(img.layer_bytes);
  out << ")\n";
  if (r.ready())
    out << s.green() << s.bold() << "READY" << s.reset()
        << (r.backend != "memray" ? ": a preload profiler will attach to "
            : r.launcher          ? ": memray will track "
                                  : ": memray could track (started by memprofile exec) ")
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
  if (!r.preload.empty())
    out << (r.backend == "memray" ? "memray extension: " : "preload: ") << r.preload << " (" << r.backend << ")\n";
  if (r.python) {
    const DebianPackage* own = r.python->debian_package.empty() ? nullptr : r.python->debian->find(r.python->debian_package);
    out << "python: " << r.python->interpreter << " (" << r.python->version << ", "
        << (own ? "Debian's " + own->name + " " + own->version +
                      (r.python->debian->codename.empty() ? "" : ", " + r.python->debian->codename)
                : std::string("not Debian's package"))
        << ")\n";
  }
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

}  // namespace memprofile
