// From a program counter in a profiled process to functions, files and
// lines, with elfutils' libdwfl: DWARF line info and inline frames, debug
// files found by build-id and .gnu_debuglink under the image's own
// /usr/lib/debug (never this machine's), the symbol table when there is no
// DWARF, names demangled (C++, Rust legacy and v0: libiberty). Files come
// from a FileTree (an image or a root directory), opened through `open`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "profile/heap_profile.h"

namespace memprofile {

class FileTree;

struct Frame {
  std::string function;  // demangled; "" when unknown
  std::string file;      // source file, "" when unknown
  int line = 0;
  std::string module;    // the mapped file's path in the image
  uint64_t module_offset = 0;  // the address as an offset into the file
  bool inlined = false;  // inlined into the next frame
  // The language runtime's own machinery under a frame of the program
  // (the Python interpreter's frames in memray's hybrid stacks).
  bool runtime = false;
  // "function (file:line)", or "module+0xoffset" when nothing resolved.
  std::string str() const;
};

// Opens a file of the image (a canonical path) read-only: an fd the caller
// owns, or -1 when the image has no such file.
using OpenFile = std::function<int(const std::string& path)>;
// The files of an image or a process's root as the symboliser opens them:
// the path resolved in `tree` (no link out of it), a regular file only, -1
// for anything else.
OpenFile open_in_tree(std::shared_ptr<FileTree> tree);

// Bytes the compressed debug sections of one file may inflate to (libdw
// inflates them all at once): past it the file's DWARF is not read, with a
// warning, and its names come from its symbol table.
constexpr uint64_t kMaxInflatedDebug = 512ull << 20;

// A file whose sampled addresses got no name: where its debug file was
// looked for, for the report to say how to get one.
struct UnnamedModule {
  std::string path;
  std::string build_id;                  // hex, "" when it has none
  std::vector<std::string> looked_for;   // debug files tried in the image (and --debug-dir)
};

class Symbolizer {
 public:
  // `debug_dir`: a directory of the user's debug files (report --debug-dir),
  // searched after the image as /usr/lib/debug is: DIR/.build-id/XX/REST.debug,
  // DIR/DIRNAME/DEBUGLINK, DIR/DEBUGLINK; "" for none.
  explicit Symbolizer(OpenFile open, std::string debug_dir = "");
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // The frames at `pc` (innermost first: inlined functions, then the one
  // they were inlined into). `caller` means pc is a return address: the
  // call instruction before it is what is looked up.
  std::vector<Frame> lookup(const Mapping& map, uint64_t pc, bool caller);

  // Checks that the image's files are the builds the process ran, where the
  // profile records no build-id (jemalloc): in the right build, a return
  // address follows a call instruction (x86-64: E8 rel32 or FF /2; arm64:
  // BL or BLR). A module where fewer than 3 in 4 of its return addresses do
  // is another build: it is not used, and a warning says so. `returns`
  // holds (mapping, return address) pairs, up to 256 per module are read.
  void check_builds(const std::vector<std::pair<const Mapping*, uint64_t>>& returns);

  // The build-id of the image's file at `path` (hex), "" when it has none
  // or is not in the image.
  std::string build_id(const std::string& path);

  // Said once per module: missing from the image, not ELF, or not the file
  // the process mapped (its segments differ from the mapping).
  const std::vector<std::string>& warnings() const { return warnings_; }

  // The files of which at least one sampled address had no name, in the
  // order met.
  std::vector<UnnamedModule> unnamed() const;

  struct Module;  // one mapped file (symbolizer.cpp)

 private:
  Module& module(const Mapping& map);
  OpenFile open_;
  std::string debug_dir_;
  std::map<std::string, std::unique_ptr<Module>> modules_;
  std::map<std::pair<std::string, uint64_t>, std::vector<Frame>> cache_;
  std::vector<std::string> warnings_;
  size_t unnamed_count_ = 0;
};

// C++ and Rust (legacy and v0) names demangled, without parameters; the name
// as it is when it is not mangled.
std::string demangle(const std::string& name);

}  // namespace memprofile
