// The preflight verdict: given an image (config + flattened root), will a
// preload heap profiler attach to the process the user cares about, and if
// not, what to fix first.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "verdict/checker.h"
#include "verdict/python_target.h"
#include "image/debian.h"
#include "image/image.h"

namespace memprofile {

struct PreflightOptions {
  std::string target;   // --target: the process to judge (a path in the image)
  std::string preload;  // --preload: the preload library (a path in the image)
  std::string backend;  // --backend: "memray" judges memray in the target interpreter, not a preload
};

struct DispatchedProgram {
  std::string path;  // canonical path in the image
  std::string named_as;  // the string found in the dispatcher
  bool profilable = false;
  std::string linkage;
};

// The `memprofile exec` entrypoint's settings, when the image has one.
struct LauncherSettings {
  std::string path, backend, preload, output_dir, target;
};

// The interpreter memray would track (--backend memray), and whether it is
// Debian's: what `make image-memprofile BACKEND=memray` installs memray for.
struct PythonFacts {
  std::string interpreter, version;    // its canonical path in the image, "3.13"
  std::string invoked;                 // as the command names it (a venv's bin/python): what runs it
  std::string debian_package;          // python3.13-minimal when Debian's package installed it ("" not)
  bool isolated_venv = false;          // a venv without the system's site-packages
  PythonInstall install;               // where memray would go, and the headers to build it with
  std::optional<DebianSystem> debian;  // the image's dpkg database, when it has one
};

struct PreflightResult {
  std::vector<std::string> argv;     // Entrypoint + Cmd
  std::string program;               // what argv[0] resolves to (after #! scripts)
  std::vector<std::string> scripts;  // #! scripts followed on the way
  std::optional<FileVerdict> target;  // the judged process
  std::vector<DispatchedProgram> dispatch;
  std::string preload, backend;      // the preload library checked and its profiler (memray: its extension)
  std::optional<LauncherSettings> launcher;
  std::optional<PythonFacts> python;  // --backend memray: the interpreter judged
  std::vector<Finding> findings;     // in the order to fix them
  bool ready() const;
};

PreflightResult preflight(const LoadedImage& image, const PreflightOptions& opts);

// Which profiler a preload library is, from its file name.
std::string backend_of(const std::string& preload_path);

// "uid", "name", "uid:gid", "name:group" resolved through the tree's
// /etc/passwd and /etc/group. False when a name is unknown.
struct UserIds {
  uint32_t uid = 0, gid = 0;
  std::vector<uint32_t> groups;  // supplementary
};
bool resolve_user(const FileTree& tree, const std::string& user, UserIds* out, std::string* error);

}  // namespace memprofile
