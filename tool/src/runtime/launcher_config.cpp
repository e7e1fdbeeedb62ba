#include "runtime/launcher_config.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_text.h"
#include "runtime/exec_settings.h"

namespace memprofile {

uint64_t profile_budget_bytes(const LauncherConfig& cfg) {
  constexpr uint64_t kMiB = 1024 * 1024;
  if (cfg.max_profile_mb) return cfg.max_profile_mb * kMiB;
  struct statvfs vfs;
  if (statvfs(cfg.output_dir.c_str(), &vfs) != 0) return 1024 * kMiB;
  return std::min<uint64_t>(static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize / 10, 1024 * kMiB);
}

std::optional<uint64_t> parse_duration_ms(const std::string& text) {
  size_t digits = text.find_first_not_of("0123456789");
  if (text.empty() || digits == 0) return std::nullopt;
  std::string number = text.substr(0, digits), unit = digits == std::string::npos ? "s" : text.substr(digits);
  if (number.size() > 9) return std::nullopt;
  uint64_t scale = unit == "s" ? 1000 : unit == "m" ? 60000 : unit == "h" ? 3600000 : unit == "d" ? 86400000 : 0;
  if (!scale) return std::nullopt;
  uint64_t ms = std::stoull(number) * scale;
  if (ms < 1000 || ms > 7 * 86400000ull) return std::nullopt;
  return ms;
}

std::string dumps_words(uint64_t dump_every_mb) {
  if (!dump_every_mb) return "at exit only";
  return "at exit and every " +
         (dump_every_mb % 1024 ? std::to_string(dump_every_mb) + " MiB" : std::to_string(dump_every_mb / 1024) + " GiB") +
         " allocated";
}

void load_launcher_config(const std::string& path, LauncherConfig& cfg) {
  std::ifstream in(path);
  if (!in) return;  // no baked-in config: defaults and flags
  std::ostringstream text;
  text << in.rdbuf();
  parse_launcher_config(text.str(), path, cfg);
}

namespace {
std::string trimmed(const std::string& v) {
  size_t b = v.find_first_not_of(" \t\r\n"), e = v.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : v.substr(b, e - b + 1);
}

// A checked value from the file or the environment into its field.
void set_setting(LauncherConfig& cfg, const ExecSetting& s, const std::string& value, uint64_t number) {
  if (s.kind == SettingKind::Backend && value.empty()) return;  // the default
  if (s.text) cfg.*(s.text) = value;
  else if (s.number) cfg.*(s.number) = number;
  else if (s.on) cfg.*(s.on) = switch_on(value);
}

std::vector<std::string> json_argv(const std::string& value, const std::string& path, int n, const std::string& key) {
  // Counted before it is parsed: the config file comes from the image.
  nlohmann::json j;
  try {
    j = parse_json_bounded(value, path + ": line " + std::to_string(n));
  } catch (const FileError& e) {
    if (std::string(e.what()).find("malformed JSON") == std::string::npos) throw;  // a limit
  }
  std::vector<std::string> out;
  if (j.is_array()) {
    for (const auto& item : j) {
      if (!item.is_string()) break;
      out.push_back(item.get<std::string>());
    }
    if (out.size() == j.size()) return out;
  }
  throw FileError(path, "line " + std::to_string(n) + ": " + key + " must be a JSON array of strings, as in an image config");
}
}  // namespace

void apply_env_overrides(LauncherConfig& cfg, const EnvLookup& lookup) {
  for (const auto& s : exec_settings()) {
    if (!s.env) continue;
    std::string v;
    if (lookup) {
      v = lookup(s.env);
    } else if (const char* e = getenv(s.env)) {
      v = e;
    }
    if (s.kind != SettingKind::Text) v = trimmed(v);
    if (v.empty()) continue;
    SettingValue checked = check_setting_value(s, v);
    if (!checked.error.empty()) throw Error(setting_error(s.env, v, checked.error, false));
    set_setting(cfg, s, v, checked.number);
  }
}

std::vector<std::string> config_command(const LauncherConfig& cfg, const std::vector<std::string>& args) {
  std::vector<std::string> argv = cfg.entrypoint;
  const auto& rest = args.empty() ? cfg.cmd : args;
  argv.insert(argv.end(), rest.begin(), rest.end());
  return argv;
}

void parse_launcher_config(const std::string& text, const std::string& path, LauncherConfig& cfg) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) throw FileError(path, "line " + std::to_string(n) + ": expected KEY=VALUE");
    std::string key = line.substr(b, eq - b), value = line.substr(eq + 1);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    value = trimmed(value);
    const ExecSetting* setting = nullptr;
    for (const auto& s : exec_settings())
      if (s.key && key == s.key) setting = &s;
    if (!setting) throw FileError(path, "line " + std::to_string(n) + ": unknown key '" + key + "'");
    if (setting->kind == SettingKind::Argv) {
      cfg.*(setting->argv) = json_argv(value, path, n, key);
      cfg.has_command = true;
      continue;
    }
    // A comment after a value that is no path or text ("256  # the floor").
    if (setting->kind != SettingKind::Text)
      if (size_t hash = value.find(" #"); hash != std::string::npos) value = trimmed(value.substr(0, hash));
    SettingValue checked = check_setting_value(*setting, value);
    if (!checked.error.empty())
      throw FileError(path, "line " + std::to_string(n) + ": " + setting_error(key, value, checked.error, false));
    set_setting(cfg, *setting, value, checked.number);
  }
}

}  // namespace memprofile
