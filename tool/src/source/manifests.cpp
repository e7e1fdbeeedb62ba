#include "source/manifests.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "base/json_text.h"
#include "base/stream.h"
#include "source/names.h"

namespace memprofile {

using nlohmann::json;

namespace {

constexpr int kMaxIndexDepth = 4;
// Manifests listed by an image's indexes in all (a multi-platform image lists
// a few dozen).
constexpr size_t kMaxDescriptors = 4096;

std::string read_verified(Store& s, const std::string& digest, const std::string& where) {
  std::string name = blob_name(digest, where);
  std::string bytes = s.read_small(name);
  std::string want = digest.substr(7);
  if (sha256_hex(bytes) != want) throw FileError(s.source() + ":" + name, "digest mismatch: content does not hash to " + digest);
  return bytes;
}

bool is_attestation(const json& desc) {
  auto a = desc.find("annotations");
  if (a != desc.end() && a->is_object() && json_string_or(*a, "vnd.docker.reference.type") == "attestation-manifest")
    return true;
  auto p = desc.find("platform");
  return p != desc.end() && p->is_object() && json_string_or(*p, "os") == "unknown";
}

// Each manifest or index is read once however often indexes list it (an
// index may list one child thousands of times, at every level), and the
// descriptors read in all are capped.
struct IndexWalk {
  std::set<std::string> seen;  // digests already read
  size_t descriptors = 0;
};

// One image manifest, as the descriptor that listed it names it.
Candidate manifest_candidate(Store& s, const json& desc, const json& manifest, const std::string& digest,
                             const std::string& where, const std::string& format) {
  std::string at = s.source() + ":" + blob_name(digest, where);
  Candidate c;
  c.format = format;
  c.reference = digest;
  if (auto p = desc.find("platform"); p != desc.end() && p->is_object())
    c.platform = {json_string_or(*p, "os"), json_string_or(*p, "architecture"), json_string_or(*p, "variant")};
  auto cfg = manifest.find("config");
  if (cfg == manifest.end() || !cfg->is_object()) throw FileError(at, "manifest has no config");
  c.config = blob_name(json_string_or(*cfg, "digest"), where);
  auto layers = manifest.find("layers");
  if (layers == manifest.end() || !layers->is_array()) throw FileError(at, "manifest has no layers");
  for (const auto& l : *layers) {
    std::string d = l.is_object() ? json_string_or(l, "digest") : "";
    c.layers.push_back(blob_name(d, where));
    c.layer_digests.push_back(d.substr(7));
  }
  return c;
}

void collect_oci(Store& s, const json& index, const std::string& where, int depth, std::vector<Candidate>& out,
                 const std::string& format, IndexWalk& walk) {
  if (depth > kMaxIndexDepth) throw FileError(where, "image indexes nested too deeply");
  auto m = index.find("manifests");
  if (m == index.end() || !m->is_array()) throw FileError(where, "index has no \"manifests\" array");
  for (const auto& desc : *m) {
    if (!desc.is_object()) throw FileError(where, "malformed descriptor in \"manifests\"");
    if (++walk.descriptors > kMaxDescriptors)
      throw FileError(where, "indexes list more than " + std::to_string(kMaxDescriptors) + " manifests (memprofile's limit)");
    if (is_attestation(desc)) continue;
    std::string digest = json_string_or(desc, "digest");
    if (!walk.seen.insert(digest).second) continue;
    std::string media = json_string_or(desc, "mediaType");
    std::string text = read_verified(s, digest, where);
    json j = parse_json_document(text, s.source() + ":" + blob_name(digest, where));
    bool nested = media.find("index") != std::string::npos || media.find("manifest.list") != std::string::npos ||
                  (j.is_object() && j.contains("manifests"));
    if (nested)
      collect_oci(s, j, s.source() + ":" + blob_name(digest, where), depth + 1, out, format, walk);
    else
      out.push_back(manifest_candidate(s, desc, j, digest, where, format));
  }
}

std::vector<Candidate> collect_docker(Store& s) {
  std::string where = s.source() + ":manifest.json";
  json j = parse_json_document(s.read_small("manifest.json"), where);
  if (!j.is_array()) throw FileError(where, "expected an array of images");
  if (j.size() > kMaxDescriptors)
    throw FileError(where, "lists more than " + std::to_string(kMaxDescriptors) + " images (memprofile's limit)");
  std::vector<Candidate> out;
  for (const auto& img : j) {
    if (!img.is_object()) throw FileError(where, "malformed image entry");
    Candidate c;
    c.format = "docker-archive";
    c.config = clean_name(json_string_or(img, "Config"));
    if (c.config.empty()) throw FileError(where, "image entry has no Config");
    auto tags = img.find("RepoTags");
    if (tags != img.end() && tags->is_array() && !tags->empty() && (*tags)[0].is_string()) c.reference = (*tags)[0];
    for (const auto& l : json_string_list(img, "Layers", where)) {
      c.layers.push_back(clean_name(l));
      // Docker >= 25 names layers by blob digest: check those too.
      c.layer_digests.push_back(l.rfind("blobs/sha256/", 0) == 0 ? l.substr(13) : "");
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Docker >= 25 writes both. Its manifest.json may list layers that the OCI
// manifest's blobs lack (moby#47065): prefer whichever is complete.
void prefer_complete(Store& s, std::vector<Candidate>& oci, const std::vector<Candidate>& docker) {
  auto complete = [&](const Candidate& c) {
    return std::all_of(c.layers.begin(), c.layers.end(), [&](const std::string& l) { return s.has(l); });
  };
  for (auto& c : oci) {
    if (complete(c)) continue;
    for (const auto& d : docker)
      if (d.config == c.config && complete(d)) {
        Platform keep = c.platform;
        std::string ref = c.reference;
        c = d;
        c.platform = keep;
        c.reference = ref;
      }
  }
}

}  // namespace

std::vector<Candidate> read_candidates(Store& s, const std::string& format) {
  bool has_index = s.has("index.json"), has_docker = s.has("manifest.json");
  if (!has_index && !has_docker)
    throw FileError(s.source(), "not an image archive: no index.json (OCI) or manifest.json (docker save)");
  std::vector<Candidate> out;
  if (!has_index) {
    out = collect_docker(s);
  } else {
    std::string where = s.source() + ":index.json";
    IndexWalk walk;
    collect_oci(s, parse_json_document(s.read_small("index.json"), where), where, 0, out,
                has_docker ? "docker-archive" : "oci-archive", walk);
    if (has_docker) prefer_complete(s, out, collect_docker(s));
  }
  if (!format.empty())
    for (auto& c : out) c.format = format;
  return out;
}

}  // namespace memprofile
