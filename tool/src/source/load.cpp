#include "source/load.h"

#include <algorithm>
#include <map>

#include "base/parallel.h"
#include "image/image_tree.h"
#include "source/manifests.h"

namespace memprofile {

namespace {

// More layers than any runtime stacks (overlayfs and Docker stop near 128);
// a manifest that lists more is crafted, and each listing costs a pass.
constexpr size_t kMaxLayers = 500;

// The candidates with their configs, each config blob read and checked once.
struct Candidates {
  std::vector<Candidate> all;
  std::vector<ImageConfig> configs;  // one per candidate
  std::string platforms;             // "linux/amd64, linux/arm64": quoted for every image chosen
};

// Step 2: the candidates and their configs; a platform the index did not
// give is taken from the config.
Candidates read_images(Store& store, const std::string& format) {
  Candidates c;
  c.all = read_candidates(store, format);
  c.configs.resize(c.all.size());
  std::map<std::string, ImageConfig> parsed;
  for (size_t i = 0; i < c.all.size(); ++i) {
    Candidate& cand = c.all[i];
    auto known = parsed.find(cand.config);
    if (known == parsed.end()) {
      std::string where = store.source() + ":" + cand.config;
      std::string text = store.read_small(cand.config);
      if (cand.config.rfind("blobs/sha256/", 0) == 0 && sha256_hex(text) != cand.config.substr(13))
        throw FileError(where, "digest mismatch: config does not hash to its name");
      known = parsed.emplace(cand.config, parse_image_config(text, where)).first;
    }
    c.configs[i] = known->second;
    if (cand.platform.architecture.empty()) cand.platform = c.configs[i].platform;
  }
  for (const auto& cand : c.all) c.platforms += (c.platforms.empty() ? "" : ", ") + cand.platform.str();
  return c;
}

// The first candidate whose platform matches `want`, if any.
std::vector<size_t> first_matching(const Candidates& c, const Platform& want) {
  for (size_t i = 0; i < c.all.size(); ++i)
    if (c.all[i].platform.matches(want)) return {i};
  return {};
}

// Step 3: which candidates to judge: all, the one asked for, the only one,
// or the host's.
std::vector<size_t> choose_platforms(const Candidates& c, const std::string& source, const ImageLoadOptions& opts) {
  if (c.all.empty()) throw FileError(source, "holds no image");
  if (opts.all_platforms) {
    std::vector<size_t> every(c.all.size());
    for (size_t i = 0; i < every.size(); ++i) every[i] = i;
    return every;
  }
  if (!opts.platform.empty()) {
    std::vector<size_t> chosen = first_matching(c, Platform::parse(opts.platform));
    if (chosen.empty()) throw FileError(source, "no image for platform " + opts.platform + " (it has: " + c.platforms + ")");
    return chosen;
  }
  if (c.all.size() == 1) return {0};
  std::vector<size_t> chosen = first_matching(c, Platform::host());
  if (chosen.empty())
    throw FileError(source, "holds several platforms (" + c.platforms + ") and none is this machine's " +
                                Platform::host().str() + "; pick one with --platform or use --all-platforms");
  return chosen;
}

// Layer summaries by blob. A blob shared by several chosen images
// (--all-platforms) or listed twice in one is decoded once; its summary is
// kept only until its last listing is applied.
class LayerCache {
 public:
  LayerCache(const Candidates& c, const std::vector<size_t>& chosen) {
    for (size_t idx : chosen)
      for (const auto& l : c.all[idx].layers) ++uses_left_[l];
  }

  // Decodes the layers of `c` not decoded yet, in parallel where the store allows.
  void decode(Store& store, const Candidate& c, const ImageLoadOptions& opts) {
    std::vector<std::string> blobs;
    for (const auto& l : c.layers)
      if (!decoded_.count(l) && std::find(blobs.begin(), blobs.end(), l) == blobs.end()) blobs.push_back(l);
    std::vector<LayerSummary> summaries(blobs.size());
    unsigned workers = store.parallel() ? worker_count(opts.jobs) : 1;
    parallel_for(blobs.size(), workers,
                 [&](size_t i) { summaries[i] = store.summarize(blobs[i], opts.source.limits); });
    for (size_t b = 0; b < blobs.size(); ++b) decoded_.emplace(blobs[b], std::move(summaries[b]));
  }

  const LayerSummary& at(const std::string& blob) const { return decoded_.at(blob); }

  // The summary for one listing: the last one gives it away; earlier ones copy.
  LayerSummary take(const std::string& blob) {
    auto at = decoded_.find(blob);
    if (--uses_left_[blob] > 0) return at->second;
    LayerSummary last = std::move(at->second);
    decoded_.erase(at);
    return last;
  }

 private:
  std::map<std::string, size_t> uses_left_;
  std::map<std::string, LayerSummary> decoded_;
};

// What the manifest and config must agree on before any layer is read.
void check_listing(Store& store, const Candidate& c, const ImageConfig& config, const std::string& source) {
  if (!config.diff_ids.empty() && config.diff_ids.size() != c.layers.size())
    throw FileError(source, "config lists " + std::to_string(config.diff_ids.size()) + " diff_ids but the manifest " +
                                std::to_string(c.layers.size()) + " layers");
  if (c.layers.size() > kMaxLayers)
    throw FileError(source, "manifest lists " + std::to_string(c.layers.size()) + " layers; memprofile reads at most " +
                                std::to_string(kMaxLayers));
  for (const auto& l : c.layers)
    if (!store.has(l)) throw FileError(source, "layer blob " + l + " is missing from the archive");
}

// Step 4: one chosen image: its layers checked against the manifest's
// digests and the config's diff_ids, and applied in order.
LoadedImage assemble(Store& store, LayerCache& cache, const Candidates& cands, size_t idx, const std::string& source,
                     const ImageLoadOptions& opts) {
  const Candidate& c = cands.all[idx];
  LoadedImage img;
  img.source = source;
  img.format = c.format;
  img.reference = c.reference;
  img.config = cands.configs[idx];
  if (cands.all.size() > 1)
    img.notes.push_back("platform " + c.platform.str() + " of " +
                        (cands.all.size() <= 16 ? cands.platforms : std::to_string(cands.all.size()) + " images"));
  check_listing(store, c, img.config, source);
  cache.decode(store, c, opts);
  auto tree = std::make_shared<ImageTree>(opts.source.limits.budget);
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const LayerSummary& s = cache.at(c.layers[i]);
    if (!c.layer_digests[i].empty() && s.blob_sha256 != c.layer_digests[i])
      throw FileError(s.name, "digest mismatch: layer does not hash to sha256:" + c.layer_digests[i]);
    if (i < img.config.diff_ids.size() && img.config.diff_ids[i] != "sha256:" + s.diff_id)
      throw FileError(s.name, "diff_id mismatch: uncompressed layer is sha256:" + s.diff_id + ", config says " +
                                  img.config.diff_ids[i]);
    img.layer_bytes += s.tar_bytes;
    tree->apply(cache.take(c.layers[i]));
  }
  img.layers = c.layers.size();
  img.anomalies = tree->anomalies();
  img.tree = tree;
  return img;
}

}  // namespace

std::vector<LoadedImage> load_images(const std::string& source, const ImageLoadOptions& opts) {
  OpenedSource opened = open_source(source, opts.source);  // step 1
  Candidates cands = read_images(*opened.store, opened.format);
  std::vector<size_t> chosen = choose_platforms(cands, source, opts);
  LayerCache cache(cands, chosen);
  std::vector<LoadedImage> images;
  for (size_t idx : chosen) images.push_back(assemble(*opened.store, cache, cands, idx, source, opts));
  return images;
}

}  // namespace memprofile
