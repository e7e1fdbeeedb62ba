#include "verdict/report.h"

#include <sys/stat.h>

namespace memprofile {

using nlohmann::json;

json to_json(const Finding& f) {
  return {{"code", f.code}, {"severity", to_string(f.severity)}, {"message", f.message}, {"fix", f.fix}};
}

json to_json(const FileReport& r) {
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

void print_human(std::ostream& out, const FileReport& r, bool color) {
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
  out << "  profilable: " << (r.profilable() ? std::string(s.green()) + "yes" : std::string(s.red()) + "no") << s.reset()
      << "\n";
}

}  // namespace memprofile
