// The launcher model: how `memprofile exec` reads its command line, finds
// the program it starts and settles its settings. `exec` (cli/cmd_exec.cpp)
// runs it against the live root; `preflight` runs it against an image whose
// entrypoint is the launcher, so both read the same command line the same
// way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "image/file_tree.h"
#include "runtime/launcher_config.h"

namespace memprofile {

// The command search when an image sets no PATH (as Docker's default).
constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// exec's options, in the order `memprofile exec --help` lists them: the
// rows of runtime/exec_settings.h that have a flag.
struct ExecOptionSpec {
  const char* name;  // "--backend"
  const char* value;  // the value's name ("NAME"), nullptr for a flag
  const char* help;
};
const std::vector<ExecOptionSpec>& exec_option_specs();

// `memprofile exec [options] [--] PROGRAM [ARGS...]`, the words after
// "exec". Options end at "--" or at the first word that is not one (the
// program: its own options are its own). A value goes in the next word or
// after '=' (`--backend=jemalloc`).
struct ExecArgs {
  std::string config = kDefaultConfigPath;
  std::string backend, preload, output_dir, target;  // "" when not given
  std::optional<uint64_t> min_free_mb, max_profile_mb, snapshot_every_ms, dump_every_mb;
  bool strict = false, from_config = false, dormant = false;
  bool python_only = false;  // memray: Python frames alone (no native_traces)
  std::string serve, serve_token_file;  // --serve ADDR:PORT: memprofile serve beside the tree
  std::string log_format = "text";
  std::vector<std::string> command;  // PROGRAM [ARGS...], or with --from-config the ARGS
  // -h/--help: the launcher prints its options and starts nothing (also an
  // error: as an entrypoint, the program would never run).
  bool help = false;
  // The first option that does not parse ("" when all do); the others are
  // still read, so the command is known.
  std::string error;
};
ExecArgs parse_exec_args(const std::vector<std::string>& args);

// Where "exec" is in a memprofile command line (`argv[0]` is the binary,
// memprofile's global -v/--verbose may come before the subcommand, as main()
// reads them); 0 when it is not `memprofile exec`.
size_t exec_subcommand_index(const std::vector<std::string>& argv);

// What the launcher will do with those arguments: its config file, under
// the MEMPROFILE_* variables (`env`), under the flags.
struct LaunchPlan {
  LauncherConfig cfg;
  Backend backend = kDefaultBackend;     // the default when cfg.backend is bad
  std::string preload;                   // cfg.preload, else the backend's default
  std::vector<std::string> argv;         // the command it runs ("" argv when none)
  bool strict = false;                   // --strict, strict in the config, or MEMPROFILE_STRICT
  // A bad config file or MEMPROFILE_* variable (with --from-config the
  // command is then unknown).
  std::string config_error;
  // Why the launcher will not profile (LAUNCHER_CONFIG): a bad flag, then a
  // bad config, then an unknown backend or one that cannot start dormant; "" when
  // the settings are good.
  std::string error;
};
// `config_text` is the config file's content (nullopt when there is none);
// `config_name` names it in messages.
LaunchPlan plan_launch(const ExecArgs& args, const std::optional<std::string>& config_text,
                       const std::string& config_name, const EnvLookup& env);

// execvp's search inside `tree`: a name with '/' is a path (relative ones
// from `cwd`), resolved whatever it is; otherwise each entry of `path_env`
// in turn (an empty entry is `cwd`, as for execvp) until one holds an
// executable regular file of that name. `path` is the file as execvp would
// name it to execve (DIR/NAME, not resolved); `file` is what it is inside
// the tree.
struct FoundProgram {
  std::string path;
  Resolved file;
  bool executable() const { return file.node.kind == FsNode::Kind::Regular && (file.node.mode & 0111); }
};
std::optional<FoundProgram> lookup_program(const FileTree& tree, const std::string& name, const std::string& path_env,
                                           const std::string& cwd);

// A "#!" line, as the kernel and env read it: the program it runs (its
// first word, or for "#!/usr/bin/env [OPTION]... NAME" the NAME env
// searches PATH for) and its arguments: the rest of the line as one, as the
// kernel passes it ("python3 -E" after env is one name; only env -S splits
// it). nullopt when `head` (a file's first bytes) is no #! script; an empty
// program for an empty #! line, or with `error` when env would refuse it.
struct Shebang {
  std::string program;
  std::vector<std::string> args;
  std::string error;  // "env: invalid option -- ' '"
  // What "#!/usr/bin/env" does to the environment first: -i clears it, -u
  // NAME unsets NAME, NAME=VALUE replaces it.
  bool env_cleared = false;
  std::vector<std::string> env_unset, env_set;
  // Whether the program starts without the value `var` had.
  bool changes(const std::string& var) const;
};
std::optional<Shebang> read_shebang(const std::string& head);

// Whether a CPython command line's options (the words after the
// interpreter, up to the script, -c or -m) skip site or ignore PYTHONPATH
// (-S, -I, -E, alone or combined as -IS): a bootstrap on PYTHONPATH then
// never loads.
bool python_ignores_pythonpath(const std::vector<std::string>& options);

// What those options say: the above, and the module -m runs ("" none).
struct PythonOptions {
  bool ignores_pythonpath = false;
  bool no_user_site = false;  // -s (or -I): the user's site-packages is left out
  std::string module;
};
PythonOptions read_python_options(const std::vector<std::string>& options);

}  // namespace memprofile
