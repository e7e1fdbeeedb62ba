#include "image/image.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_text.h"

namespace memprofile {

using nlohmann::json;

std::string Platform::str() const {
  std::string s = (os.empty() ? "?" : os) + "/" + (architecture.empty() ? "?" : architecture);
  if (!variant.empty()) s += "/" + variant;
  return s;
}

Platform Platform::parse(const std::string& s) {
  Platform p;
  size_t a = s.find('/');
  if (a == std::string::npos) throw Error("--platform must look like os/arch[/variant], e.g. linux/arm64");
  p.os = s.substr(0, a);
  size_t b = s.find('/', a + 1);
  p.architecture = s.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
  if (b != std::string::npos) p.variant = s.substr(b + 1);
  if (p.os.empty() || p.architecture.empty()) throw Error("--platform must look like os/arch[/variant], e.g. linux/arm64");
  return p;
}

Platform Platform::host() {
#if defined(__x86_64__)
  return {"linux", "amd64", ""};
#elif defined(__aarch64__)
  return {"linux", "arm64", ""};
#else
  return {"linux", "", ""};
#endif
}

bool Platform::matches(const Platform& want) const {
  auto variant_of = [](const Platform& p) { return p.architecture == "arm64" && p.variant.empty() ? "v8" : p.variant; };
  return (want.os.empty() || want.os == os) && (want.architecture.empty() || want.architecture == architecture) &&
         (want.variant.empty() || variant_of(want) == variant_of(*this));
}

std::string ImageConfig::env_value(const std::string& key, bool* present) const {
  std::string value;
  bool found = false;
  for (const auto& e : env)
    if (e.compare(0, key.size() + 1, key + "=") == 0) {
      value = e.substr(key.size() + 1);
      found = true;
    }
  if (present) *present = found;
  return value;
}

ImageConfig parse_image_config(const std::string& text, const std::string& name) {
  json j = parse_json_document(text, name);
  if (!j.is_object()) throw FileError(name, "malformed JSON: image config is not an object");
  ImageConfig c;
  c.platform = {json_string_or(j, "os"), json_string_or(j, "architecture"), json_string_or(j, "variant")};
  auto cfg = j.find("config");
  if (cfg != j.end() && cfg->is_object()) {
    c.entrypoint = json_string_list(*cfg, "Entrypoint", name);
    c.cmd = json_string_list(*cfg, "Cmd", name);
    c.env = json_string_list(*cfg, "Env", name);
    c.user = json_string_or(*cfg, "User");
    c.working_dir = json_string_or(*cfg, "WorkingDir");
  }
  auto rootfs = j.find("rootfs");
  if (rootfs != j.end() && rootfs->is_object()) c.diff_ids = json_string_list(*rootfs, "diff_ids", name);
  return c;
}

}  // namespace memprofile
