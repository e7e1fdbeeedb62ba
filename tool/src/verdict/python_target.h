// A CPython interpreter as the memray backend needs it: which Python it is,
// and the memray package its sys.path would import, with the compiled
// extension that must load into it. memray is no preload library: its
// bootstrap (sitecustomize.py, beside the control library) starts the
// tracker inside the interpreter, and the extension is what the loader
// must resolve there.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "elf/elf_info.h"
#include "image/file_tree.h"
#include "runtime/launcher.h"
#include "verdict/findings.h"

namespace memprofile {

struct PythonVersion {
  int major = 0, minor = 0;
  // The ABI flags of its build: "t" free-threaded, "d" debug. An interpreter
  // imports only extensions tagged with its own (cpython-313t under 3.13t).
  std::string abiflags;
  bool operator==(const PythonVersion& o) const {
    return major == o.major && minor == o.minor && abiflags == o.abiflags;
  }
};
std::string to_string(const PythonVersion& v);  // "3.13", "3.13t"

// The version of a CPython interpreter: from its file name (python3.13,
// as Debian's python3 resolves to) or the libpython it links; nullopt when
// `path` names no CPython.
std::optional<PythonVersion> python_version(const std::string& path, const ElfInfo& elf);

// A compiled extension's name, _memray.cpython-313-x86_64-linux-gnu.so:
// its Python and its multiarch triplet ("" when the name has none).
struct ExtensionTag {
  PythonVersion version;
  std::string triplet;
};
std::optional<ExtensionTag> extension_tag(const std::string& file_name);

// The directories CPython's sys.path holds for packages, in its order:
// PYTHONPATH's, then the prefix's site-packages, then Debian's.
std::vector<std::string> site_dirs(const std::string& interpreter, const PythonVersion& v, const std::string& pythonpath);

// Where a package installed for this interpreter goes, as pip would put it:
// a venv's site-packages; for an interpreter of prefix /usr in an image with
// Debian's dist-packages, /usr/local/lib/python3.X/dist-packages; else its
// prefix's lib/python3.X/site-packages. And its C headers (sysconfig's
// INCLUDEPY, PREFIX/include/python3.X plus the ABI flags), which a memray
// built from source compiles against.
struct PythonInstall {
  std::string site_packages, include_dir;
  bool headers = false;  // include_dir/Python.h is in the image
};
PythonInstall python_install(const FileTree& tree, const std::string& interpreter, const std::string& invoked,
                             const PythonVersion& v);

// The installation an interpreter belongs to: for a venv (`invoked` its
// bin/python), the one pyvenv.cfg's home names (home/python3.X, also for a
// --copies venv whose interpreter is a copy); else `interpreter` itself.
std::string base_interpreter(const FileTree& tree, const std::string& interpreter, const std::string& invoked,
                             const PythonVersion& v);

struct MemrayFound {
  std::string package;    // the memray directory imported
  std::string extension;  // its _memray extension for this interpreter ("" none)
};
// The directories a virtual environment adds: `invoked` is the interpreter
// as the command names it (/opt/venv/bin/python, before its links are
// followed); with pyvenv.cfg in its bin/'s parent, that prefix's
// site-packages, and whether the base's directories follow
// (include-system-site-packages). Empty when it is no venv.
std::vector<std::string> venv_dirs(const FileTree& tree, const std::string& invoked, const PythonVersion& v,
                                   bool* with_base);

// What keeps memprofile's bootstrap (first on PYTHONPATH) from starting
// memray's tracker in `interpreter`, run with `options` (its command line's
// words, or its #! line's) through `env_script` (a script whose #! env
// clears or replaces PYTHONPATH or memprofile's variables; "" none): -I, -E
// or -S, that env, and `-m memray` (the app's own tracker).
std::vector<Finding> bootstrap_problems(const std::string& interpreter, const std::vector<std::string>& options,
                                        const std::string& env_script);
// Whether a #! line's env drops what the bootstrap needs.
bool drops_bootstrap(const Shebang& sb);

// A venv's interpreter's version from its pyvenv.cfg (a copy named
// "python" says nothing by its name); nullopt when `invoked` is in no venv.
std::optional<PythonVersion> venv_version(const FileTree& tree, const std::string& invoked);

// The home directory of `uid` in the tree's /etc/passwd ("" none): where
// Python's expanduser goes when HOME is unset, as the engines set HOME.
std::string passwd_home(const FileTree& tree, uint32_t uid);

// memray for the interpreter at `interpreter` (canonical, an ELF of the
// tree), run as `invoked`: the findings that keep it from working (none
// when it will), and what was found.
// `user_base` is the user's site base (PYTHONUSERBASE, else ~/.local: see
// python_user_base), "" when the user site is off.
std::vector<Finding> find_memray(const FileTree& tree, const std::string& invoked, const std::string& interpreter,
                                 const ElfInfo& elf, const std::string& pythonpath, MemrayFound* found,
                                 const std::string& user_base = "");

// The user site's base as site.py finds it: "" when -s, -I or
// PYTHONNOUSERSITE turn it off (or there is no home), else PYTHONUSERBASE,
// else HOME/.local.
std::string python_user_base(const std::vector<std::string>& options, const std::string& nousersite,
                             const std::string& userbase, const std::string& home);

}  // namespace memprofile
