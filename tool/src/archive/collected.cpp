#include "archive/collected.h"

#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_text.h"
#include "base/tar_reader.h"

namespace memprofile {

namespace {

std::string bad_type(const TarEntry& e) {
  switch (e.type) {
    case '0': return "";
    case '1': return "a hard link (-> " + e.linkname + ")";
    case '2': return "a symbolic link (-> " + e.linkname + ")";
    case '3': return "a character device";
    case '4': return "a block device";
    case '5': return "a directory entry";
    case '6': return "a fifo";
    default: return std::string("an entry of type '") + e.type + "'";
  }
}

// An entry's bytes as the consumer reads them, hashed and counted; what it
// leaves unread is drained (and hashed) after.
class Tee : public Reader {
 public:
  explicit Tee(TarReader& tar) : tar_(tar) {}
  size_t read(void* buf, size_t n) override {
    size_t r = tar_.read(buf, n);
    sha_.update(buf, r);
    count_ += r;
    return r;
  }
  void drain() {
    std::vector<char> buf(1 << 16);
    while (read(buf.data(), buf.size()) > 0) {
    }
  }
  uint64_t count() const { return count_; }
  std::string hex() { return sha_.hex(); }

 private:
  TarReader& tar_;
  Sha256 sha_;
  uint64_t count_ = 0;
};

}  // namespace

std::string collect_bad_name(const std::string& name) {
  if (name.empty()) return "an empty name";
  if (name[0] == '/') return "an absolute path";
  size_t start = 0;
  for (;;) {
    size_t slash = name.find('/', start);
    std::string part = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part == "..") return "a '..' path, which leads out of the directory";
    if (part.empty() || part == ".") return "not a plain relative path";
    if (slash == std::string::npos) return "";
    start = slash + 1;
  }
}

CollectedArchive read_collected(Reader& in, const std::string& name,
                                const std::function<void(const std::string& entry, Reader& bytes)>& on_entry) {
  TarReader tar(in, name);
  TarEntry e;
  std::map<std::string, std::pair<uint64_t, std::string>> seen;
  std::vector<std::string> order;
  std::string manifest;
  bool have_manifest = false;
  auto reject = [&](const std::string& entry, const std::string& why) {
    throw FileError(name, "entry '" + entry + "': " + why + "; not an archive collect writes");
  };
  while (tar.next(e)) {
    if (std::string why = collect_bad_name(e.name); !why.empty()) reject(e.name, why);
    if (std::string why = bad_type(e); !why.empty()) reject(e.name, why);
    if (e.name == kCollectManifest ? have_manifest : seen.count(e.name) > 0) reject(e.name, "appears twice in the archive");
    if (e.name == kCollectManifest) {
      if (e.size > kMaxCollectManifest)
        reject(e.name, "is " + std::to_string(e.size) + " bytes, more than collect ever writes");
      manifest.resize(static_cast<size_t>(e.size));
      size_t got = 0;
      for (size_t r; got < manifest.size() && (r = tar.read(&manifest[got], manifest.size() - got)) > 0;) got += r;
      have_manifest = true;
      continue;
    }
    Tee bytes(tar);
    on_entry(e.name, bytes);
    bytes.drain();
    seen[e.name] = {bytes.count(), bytes.hex()};
    order.push_back(e.name);
  }
  if (!have_manifest)
    throw FileError(name, std::string("no ") + kCollectManifest + ": not a memprofile collect archive, or cut short");
  CollectedArchive out;
  try {
    nlohmann::json m = parse_json_bounded(manifest, name + ":" + kCollectManifest);
    if (m.contains("backend") && m["backend"].is_string()) out.backend = m["backend"].get<std::string>();
    for (const auto& f : m.at("files"))
      out.files.push_back({f.at("name").get<std::string>(), f.at("sha256").get<std::string>(), f.at("size").get<uint64_t>(), ""});
    if (auto skipped = m.find("skipped"); skipped != m.end() && skipped->is_array())
      for (const auto& sk : *skipped)
        if (sk.is_object() && sk.value("cut", false) && sk.contains("name") && sk["name"].is_string())
          out.cut.push_back(sk["name"].get<std::string>());
  } catch (const nlohmann::json::exception&) {
    throw FileError(name, std::string("malformed ") + kCollectManifest);
  }
  std::map<std::string, int> listed;
  for (const auto& f : out.files)
    if (++listed[f.name] == 2) out.problems.push_back("entry '" + f.name + "': listed twice in the manifest");
  std::set<std::string> cut(out.cut.begin(), out.cut.end());
  for (const auto& entry : order)
    if (!listed.count(entry) && !cut.count(entry))
      out.problems.push_back("entry '" + entry + "': in the archive but not listed in the manifest");
  for (const auto& [entry, count] : listed)
    if (!seen.count(entry)) out.problems.push_back("entry '" + entry + "': listed in the manifest but missing from the archive");
  for (auto& f : out.files) {
    auto it = seen.find(f.name);
    if (it == seen.end()) continue;
    const auto& [size, sha] = it->second;
    if (size != f.size)
      f.mismatch = "size " + std::to_string(size) + ", manifest says " + std::to_string(f.size);
    else if (sha != f.sha256)
      f.mismatch = "sha256 differs from the manifest";
  }
  return out;
}

}  // namespace memprofile
