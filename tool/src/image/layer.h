// One image layer, read in one streaming pass and kept as a summary: for
// each entry its path, type, mode, owner, capabilities and, for ELF files,
// the parsed facts (never the contents). The OCI whiteout markers are kept
// as entries so that flattening can apply them to lower layers only.
#pragma once

#include <cstdint>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/arena.h"
#include "base/stream.h"
#include "base/unique_fd.h"
#include "elf/elf_info.h"

namespace memprofile {

// What a file's content told us; most files have none, so it is shared and
// optional to keep a node small (images hold tens of thousands of them).
struct FileFacts {
  std::shared_ptr<const ElfInfo> elf;  // ELF files only
  std::string elf_error;               // set when an ELF file could not be parsed
  std::string content;                 // whole small config files, or the head of executables
  std::string path_strings;            // ELF executables: path-like strings in the file, '\n'-separated
  std::shared_ptr<const UniqueFd> data;  // the whole file in a memfd, when the run asked for it (Capture)
};

// Names are views into the layer's arena (LayerSummary::names), which the
// image tree keeps alive once the layer is applied.
struct LayerNode {
  enum class Kind : uint8_t { File, Dir, Symlink, Hardlink, Other, Whiteout, Opaque };
  std::string_view path;  // normalised absolute path ("/usr/bin/app"); for Whiteout the path it deletes
  std::string_view link;  // symlink target as stored; hardlink target as a normalised absolute path
  std::shared_ptr<const FileFacts> facts;
  uint64_t size = 0;
  uint32_t mode = 0, uid = 0, gid = 0;
  Kind kind = Kind::File;
  bool file_caps = false;
};

struct LayerSummary {
  std::string name;  // blob name in its archive
  std::string blob_sha256;  // of the stored (possibly compressed) bytes
  std::string diff_id;      // sha256 of the uncompressed tar
  uint64_t stored_bytes = 0, tar_bytes = 0;
  uint64_t entries = 0;  // tar entries read, repeated paths included
  Compression compression = Compression::None;
  std::shared_ptr<StringArena> names = std::make_shared<StringArena>();  // what nodes' names point into
  // One per path: a path repeated in the tar keeps its last entry. A deque,
  // so it grows without copying itself and is given back block by block as
  // the image tree takes the nodes.
  std::deque<LayerNode> nodes;
  Charge held;  // what names, nodes and kept contents take of the run's budget
  std::vector<std::string> anomalies;  // entries handled specially, for the report
};

// Names longer than PATH_MAX cannot be extracted by any runtime: such
// entries are noted and skipped, which bounds the memory one name costs.
constexpr size_t kMaxEntryName = 4096;
// Directories deep: each level is a node of its own once flattened, so a
// crafted path's depth multiplies what one entry costs. Real trees are < 30.
constexpr size_t kMaxEntryDepth = 256;
// Entries of one layer (real layers hold tens of thousands); each kept node
// costs memory, so a layer of millions of tiny entries is refused.
constexpr uint64_t kMaxLayerEntries = 1u << 20;

// Files whose whole content a run keeps, in memfds (memprofile report reads
// the binaries a profile names, and their debug files, out of the image in
// the one pass that reads it). Called from the layer workers at once.
class Capture {
 public:
  static constexpr uint64_t kMaxBytes = 4ull << 30;  // all captured files of a run
  explicit Capture(std::function<bool(const std::string& path)> wants) : wants_(std::move(wants)) {}
  bool wants(const std::string& path) const { return wants_(path); }
  // Takes `bytes` of the run's allowance; false when it is spent.
  bool take(uint64_t bytes) { return (used_ += bytes) <= kMaxBytes; }

 private:
  std::function<bool(const std::string&)> wants_;
  std::atomic<uint64_t> used_{0};
};

struct LayerLimits {
  uint64_t max_tar_bytes = 64ull << 30;  // decompression bomb fence
  std::shared_ptr<Capture> capture;      // files to keep whole; null: none
  // Shared by every layer and tree of one run (copies of the limits share it).
  std::shared_ptr<MemoryBudget> budget = std::make_shared<MemoryBudget>();
};

// Reads a layer blob (gzip, zstd or plain tar). Throws FileError on corrupt
// input; `name` prefixes every message.
LayerSummary summarize_layer(Reader& blob, const std::string& name, const LayerLimits& limits = {});

// Path-like strings in a file (runs of path characters starting with '/'),
// '\n'-separated; nullptr when there are none.
std::shared_ptr<const std::string> scan_path_strings(Reader& in);

// Files whose whole content preflight needs (passwd, group, ld.so.cache, ...).
bool is_config_file(const std::string& path);

}  // namespace memprofile
