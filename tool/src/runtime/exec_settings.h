// exec's settings as one table: each row names a setting once for every
// place it can come from (exec's flag, the exec.conf key, the MEMPROFILE_*
// variable), the kind of value it takes and the check that value must
// pass, and where it lands (ExecArgs for the flag, LauncherConfig for the
// file and the environment). The flag parser (runtime/launcher.cpp) and
// the file and environment readers (runtime/launcher_config.cpp) read this
// table and nothing else; a new setting is a new row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/launcher_config.h"

namespace memprofile {

struct ExecArgs;

enum class SettingKind {
  Text,      // any string
  Backend,   // a backend's name (parse_backend)
  Mib,       // a whole number of MiB
  Interval,  // 0 or a power of two of MiB, up to 1 TiB (jemalloc's lg_prof_interval)
  Duration,  // 1 s to 7 d (parse_duration_ms): N, Ns, Nm, Nh, Nd
  Switch,    // a flag without a value; "1" or "true" in the file and the environment
  Format,    // text or json
  Argv,      // a JSON array of strings, as an image config has it (the file only)
};

struct ExecSetting {
  const char* flag;   // "--max-profile-mb"; nullptr: no flag
  const char* value;  // the value's name in --help ("N"); nullptr for a switch
  const char* key;    // exec.conf's key; nullptr: not in the file
  const char* env;    // the MEMPROFILE_* variable; nullptr: none
  SettingKind kind;
  const char* help;
  // Where the flag's value goes (one of these, by kind; none for a flag
  // that is not a setting of LauncherConfig's).
  std::string ExecArgs::*arg_text = nullptr;
  std::optional<uint64_t> ExecArgs::*arg_number = nullptr;
  bool ExecArgs::*arg_on = nullptr;
  // Where the file's and the environment's value goes, and where a flag's
  // value goes over them.
  std::string LauncherConfig::*text = nullptr;
  uint64_t LauncherConfig::*number = nullptr;
  bool LauncherConfig::*on = nullptr;
  std::vector<std::string> LauncherConfig::*argv = nullptr;
};

// Every setting, in the order `memprofile exec --help` lists the flags.
const std::vector<ExecSetting>& exec_settings();

// A value read as its row's kind asks: the number (MiB, or ms for a
// duration), and "" when it is good, else what is wrong with it, to follow
// the setting's name and value ("is not a number of MiB"; joined with ": "
// where it is a sentence of its own, as a backend's).
struct SettingValue {
  uint64_t number = 0;
  std::string error;
};
SettingValue check_setting_value(const ExecSetting& s, const std::string& value);
// The line for a value check_setting_value refused: "--flag VALUE is not
// ..." for a flag, "key is not ...: 'VALUE'" for the file and the
// environment (the value last: it may be long, or blank).
std::string setting_error(const std::string& name, const std::string& value, const std::string& error, bool flag);
// A switch's value in the file or the environment: "1" or "true" is on.
inline bool switch_on(const std::string& v) { return v == "1" || v == "true"; }

}  // namespace memprofile
