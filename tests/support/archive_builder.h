// Hand-built tar archives and OCI image layouts for hostile-input tests:
// what real tools never write (path traversal, bad digests, bombs) has to be
// made by hand.
#pragma once

#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/stream.h"
#include "image/layer.h"
#include "support.h"

namespace testing {

class TarWriter {
 public:
  // type: '0' file, '1' hardlink, '2' symlink, '5' dir.
  TarWriter& add(const std::string& name, const std::string& content = "", char type = '0', unsigned mode = 0644,
                 const std::string& link = "", long long size_override = -1) {
    char h[512];
    std::memset(h, 0, sizeof h);
    std::snprintf(h, 100, "%s", name.c_str());
    std::snprintf(h + 100, 8, "%07o", mode);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    unsigned long long size = size_override >= 0 ? static_cast<unsigned long long>(size_override) : content.size();
    std::snprintf(h + 124, 12, "%011llo", size);
    std::snprintf(h + 136, 12, "%011o", 0);
    h[156] = type;
    std::snprintf(h + 157, 100, "%s", link.c_str());
    std::memcpy(h + 257, "ustar\0" "00", 8);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : std::string(h, 512)) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    out_.append(h, 512);
    out_ += content;
    out_.append((512 - content.size() % 512) % 512, '\0');
    return *this;
  }
  std::string finish() const { return out_ + std::string(1024, '\0'); }
  std::string unterminated() const { return out_; }

 private:
  std::string out_;
};

// PAX extended-header records ("LEN key=value\n", LEN counting itself).
inline std::string pax(const std::vector<std::pair<std::string, std::string>>& recs) {
  std::string out;
  for (const auto& [k, v] : recs) {
    std::string body = " " + k + "=" + v + "\n";
    size_t len = body.size() + 1;
    while (std::to_string(len).size() + body.size() != len) ++len;
    out += std::to_string(len) + body;
  }
  return out;
}

// A layer summarised from bytes in memory, named "layer".
inline memprofile::LayerSummary summarize(const std::string& bytes) {
  memprofile::MemReader r(bytes.data(), bytes.size());
  return memprofile::summarize_layer(r, "layer");
}

inline std::string gzip(const std::string& data) {
  z_stream z{};
  deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// An OCI image layout written to a directory. Layers are tars (compressed
// or not); the config's diff_ids and every descriptor are computed unless a
// test asks for them to be wrong.
struct OciImage {
  std::vector<std::string> layers;      // stored bytes
  std::vector<std::string> layer_tars;  // uncompressed, for diff_ids
  std::string entrypoint_json = "[\"/app\"]";
  std::string env_json = "[\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"]";
  std::string user;
  std::string architecture = "amd64";
  bool corrupt_layer_digest = false;
  bool corrupt_diff_id = false;
  bool drop_first_layer_blob = false;
  std::string config_override;  // raw config JSON

  OciImage& layer(const std::string& tar, bool compress = true) {
    layer_tars.push_back(tar);
    layers.push_back(compress ? gzip(tar) : tar);
    return *this;
  }

  static std::string digest(const std::string& bytes) { return "sha256:" + memprofile::sha256_hex(bytes); }

  void write_blob(const std::string& dir, const std::string& bytes) const {
    write_file(dir + "/blobs/sha256/" + memprofile::sha256_hex(bytes), bytes);
  }

  void write(const std::string& dir) const {
    make_dirs(dir + "/blobs/sha256");
    write_file(dir + "/oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}");
    std::string diff_ids, layer_descs;
    for (size_t i = 0; i < layers.size(); ++i) {
      std::string d = digest(layer_tars[i]);
      if (corrupt_diff_id) d = digest(layer_tars[i] + "x");
      diff_ids += (i ? "," : "") + ("\"" + d + "\"");
      std::string ld = digest(layers[i]);
      if (!(drop_first_layer_blob && i == 0)) {
        if (corrupt_layer_digest && i == 0)
          write_file(dir + "/blobs/sha256/" + ld.substr(7), layers[i] + "tampered");
        else
          write_blob(dir, layers[i]);
      }
      layer_descs += (i ? "," : "") + std::string("{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",") +
                     "\"digest\":\"" + ld + "\",\"size\":" + std::to_string(layers[i].size()) + "}";
    }
    std::string config = config_override.empty()
                             ? "{\"architecture\":\"" + architecture + "\",\"os\":\"linux\",\"config\":{\"Entrypoint\":" +
                                   entrypoint_json + ",\"Env\":" + env_json + ",\"User\":\"" + user +
                                   "\"},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[" + diff_ids + "]}}"
                             : config_override;
    write_blob(dir, config);
    std::string manifest = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
                           "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"" +
                           digest(config) + "\",\"size\":" + std::to_string(config.size()) + "},\"layers\":[" +
                           layer_descs + "]}";
    write_blob(dir, manifest);
    write_file(dir + "/index.json", "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image."
                                    "manifest.v1+json\",\"digest\":\"" +
                                        digest(manifest) + "\",\"size\":" + std::to_string(manifest.size()) + "}]}");
  }
};

}  // namespace testing
