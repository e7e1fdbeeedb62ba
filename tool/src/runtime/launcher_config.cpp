#include "runtime/launcher_config.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_text.h"

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

void load_launcher_config(const std::string& path, LauncherConfig& cfg) {
  std::ifstream in(path);
  if (!in) return;  // no baked-in config: defaults and flags
  std::ostringstream text;
  text << in.rdbuf();
  parse_launcher_config(text.str(), path, cfg);
}

namespace {
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
  std::string value;
  auto env = [&](const char* name) -> const char* {
    if (lookup) {
      value = lookup(name);
      return value.empty() ? nullptr : value.c_str();
    }
    const char* v = getenv(name);
    return v && *v ? v : nullptr;
  };
  if (const char* v = env("MEMPROFILE_BACKEND")) {
    parse_backend(v);
    cfg.backend = v;
  }
  if (const char* v = env("MEMPROFILE_PRELOAD")) cfg.preload = v;
  if (const char* v = env("MEMPROFILE_OUTPUT_DIR")) cfg.output_dir = v;
  if (const char* v = env("MEMPROFILE_TARGET")) cfg.target = v;
  if (const char* v = env("MEMPROFILE_SERVE")) cfg.serve = v;
  if (const char* v = env("MEMPROFILE_SERVE_TOKEN_FILE")) cfg.serve_token_file = v;
  auto number = [](const char* name, const char* v) -> uint64_t {
    char* end = nullptr;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || *v == '-') throw Error(std::string(name) + " is not a number: " + v);
    return n;
  };
  if (const char* v = env("MEMPROFILE_MIN_FREE_MB")) cfg.min_free_mb = number("MEMPROFILE_MIN_FREE_MB", v);
  if (const char* v = env("MEMPROFILE_MAX_PROFILE_MB")) cfg.max_profile_mb = number("MEMPROFILE_MAX_PROFILE_MB", v);
  if (const char* v = env("MEMPROFILE_SNAPSHOT_EVERY")) {
    auto ms = parse_duration_ms(v);
    if (!ms) throw Error(std::string("MEMPROFILE_SNAPSHOT_EVERY is not a duration of 1s to 7d (30s, 5m, 1h): ") + v);
    cfg.snapshot_every_ms = *ms;
  }
  if (const char* v = env("MEMPROFILE_DORMANT")) cfg.dormant = std::string(v) == "1" || std::string(v) == "true";
  if (const char* v = env("MEMPROFILE_CTL_LIBRARY")) cfg.ctl_library = v;
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
    size_t vb = value.find_first_not_of(" \t");
    value = vb == std::string::npos ? "" : value.substr(vb);
    if (key == "backend") {
      parse_backend(value);
      cfg.backend = value;
    } else if (key == "preload") {
      cfg.preload = value;
    } else if (key == "output_dir") {
      cfg.output_dir = value;
    } else if (key == "serve") {
      cfg.serve = value;
    } else if (key == "serve_token_file") {
      cfg.serve_token_file = value;
    } else if (key == "target") {
      cfg.target = value;
    } else if (key == "min_free_mb") {
      try {
        cfg.min_free_mb = std::stoull(value);
      } catch (const std::exception&) {
        throw FileError(path, "line " + std::to_string(n) + ": min_free_mb is not a number");
      }
    } else if (key == "max_profile_mb") {
      try {
        cfg.max_profile_mb = std::stoull(value);
      } catch (const std::exception&) {
        throw FileError(path, "line " + std::to_string(n) + ": max_profile_mb is not a number");
      }
    } else if (key == "snapshot_every") {
      auto ms = parse_duration_ms(value);
      if (!ms)
        throw FileError(path, "line " + std::to_string(n) + ": snapshot_every is not a duration of 1s to 7d (30s, 5m, 1h)");
      cfg.snapshot_every_ms = *ms;
    } else if (key == "dormant") {
      cfg.dormant = value == "1" || value == "true";
    } else if (key == "ctl_library") {
      cfg.ctl_library = value;
    } else if (key == "strict") {
      cfg.strict = value == "1" || value == "true";
    } else if (key == "entrypoint") {
      cfg.entrypoint = json_argv(value, path, n, key);
      cfg.has_command = true;
    } else if (key == "cmd") {
      cfg.cmd = json_argv(value, path, n, key);
      cfg.has_command = true;
    } else {
      throw FileError(path, "line " + std::to_string(n) + ": unknown key '" + key + "'");
    }
  }
}

}  // namespace memprofile
