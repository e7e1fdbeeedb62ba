#include "runtime/launcher.h"

#include <algorithm>

#include "base/error.h"
#include "runtime/exec_settings.h"

namespace memprofile {

const std::vector<ExecOptionSpec>& exec_option_specs() {
  static const std::vector<ExecOptionSpec> specs = [] {
    std::vector<ExecOptionSpec> out;
    for (const auto& s : exec_settings())
      if (s.flag) out.push_back({s.flag, s.value, s.help});
    return out;
  }();
  return specs;
}

ExecArgs parse_exec_args(const std::vector<std::string>& args) {
  ExecArgs out;
  auto fail = [&](const std::string& why) {
    if (out.error.empty()) out.error = "memprofile exec: " + why;
  };
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;  // the program, given without "--"
    std::string name = a, value;
    bool inline_value = false;
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    if (a == "-h" || a == "--help") {
      out.help = true;
      fail(a + " prints the options and starts nothing");
      continue;
    }
    const ExecSetting* spec = nullptr;
    for (const auto& s : exec_settings())
      if (s.flag && name == s.flag) spec = &s;
    if (!spec) {
      fail("unknown option " + a);
      continue;
    }
    if (!spec->value) {
      if (inline_value) fail(name + " takes no value");
      else out.*(spec->arg_on) = true;
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) {
        fail(name + " needs a value");
        continue;
      }
      value = args[++i];
    }
    SettingValue v = check_setting_value(*spec, value);
    if (!v.error.empty()) fail(setting_error(name, value, v.error, true));
    else if (spec->arg_number) out.*(spec->arg_number) = v.number;
    else out.*(spec->arg_text) = value;
  }
  out.command.assign(args.begin() + static_cast<std::ptrdiff_t>(std::min(i, args.size())), args.end());
  return out;
}

size_t exec_subcommand_index(const std::vector<std::string>& argv) {
  auto global = [](const std::string& a) {
    return a == "--verbose" || (a.size() >= 2 && a[0] == '-' && a.find_first_not_of('v', 1) == std::string::npos);
  };
  size_t i = 1;
  while (i < argv.size() && global(argv[i])) ++i;
  return i < argv.size() && argv[i] == "exec" ? i : 0;
}

LaunchPlan plan_launch(const ExecArgs& args, const std::optional<std::string>& config_text,
                       const std::string& config_name, const EnvLookup& env) {
  LaunchPlan plan;
  LauncherConfig& cfg = plan.cfg;
  try {
    if (config_text) parse_launcher_config(*config_text, config_name, cfg);
    apply_env_overrides(cfg, env);
  } catch (const Error& e) {
    plan.config_error = e.what();
  }
  // The flags over the file and the environment.
  for (const auto& s : exec_settings()) {
    if (s.arg_text && s.text && !(args.*(s.arg_text)).empty()) cfg.*(s.text) = args.*(s.arg_text);
    if (s.arg_number && s.number && args.*(s.arg_number)) cfg.*(s.number) = *(args.*(s.arg_number));
    if (s.arg_on && s.on && args.*(s.arg_on)) cfg.*(s.on) = true;
  }
  plan.strict = cfg.strict || (env && switch_on(env("MEMPROFILE_STRICT")));
  plan.argv = args.from_config ? config_command(cfg, args.command) : args.command;
  std::string backend_error;
  try {
    plan.backend = parse_backend(cfg.backend);
  } catch (const Error& e) {
    backend_error = e.what();
  }
  // --backend none, and tcmalloc (its profiler is the program's): the
  // control library is all that is loaded, and what must attach.
  plan.preload = plan.backend == Backend::None || plan.backend == Backend::Tcmalloc ? cfg.ctl_library
                 : cfg.preload.empty()         ? default_preload(plan.backend)
                                               : cfg.preload;
  if (backend_error.empty() && cfg.dormant) backend_error = dormant_unsupported(plan.backend);
  if (backend_error.empty()) backend_error = settings_unsafe(plan.backend, cfg.output_dir, plan.preload, cfg.ctl_library);
  plan.error = !args.error.empty() ? args.error : !plan.config_error.empty() ? plan.config_error : backend_error;
  return plan;
}

namespace {

// A relative path is joined to `cwd` here, before resolving, so that its
// ".." are taken after the links of `cwd` are followed, as the kernel does.
std::optional<Resolved> try_resolve(const FileTree& tree, const std::string& path, const std::string& cwd) {
  return memprofile::try_resolve(tree, path[0] == '/' ? path : (cwd.empty() ? "/" : cwd) + "/" + path);
}

}  // namespace

std::optional<FoundProgram> lookup_program(const FileTree& tree, const std::string& name, const std::string& path_env,
                                           const std::string& cwd) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    auto r = try_resolve(tree, name, cwd);
    if (!r) return std::nullopt;
    return FoundProgram{name, std::move(*r)};
  }
  size_t i = 0;
  while (i <= path_env.size()) {
    size_t j = path_env.find(':', i);
    if (j == std::string::npos) j = path_env.size();
    std::string cand = (j > i ? path_env.substr(i, j - i) : std::string(".")) + "/" + name;
    i = j + 1;
    auto r = try_resolve(tree, cand, cwd);
    if (!r) continue;
    FoundProgram found{cand, std::move(*r)};
    if (found.executable()) return found;
  }
  return std::nullopt;
}

namespace {

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// env -S's string as GNU env splits it: at blanks, '...' and "..." kept
// whole, a backslash taking the next character, a word starting with #
// ending the line.
std::vector<std::string> split_string(const std::string& s) {
  std::vector<std::string> words;
  std::string w;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
      else if (c == '\\' && quote == '"' && i + 1 < s.size()) w += s[++i];
      else w += c;
    } else if (blank(c)) {
      if (in_word) words.push_back(w);
      w.clear();
      in_word = false;
    } else if (c == '#' && !in_word) {
      break;
    } else {
      in_word = true;
      if (c == '\'' || c == '"') quote = c;
      else if (c == '\\' && i + 1 < s.size()) w += s[++i];
      else w += c;
    }
  }
  if (in_word) words.push_back(w);
  return words;
}

// GNU env's arguments, as getopt reads them: options (clustered, -S's
// string split into more arguments), NAME=VALUE, then the program and its
// arguments. An option env does not know ends it with an error.
void read_env_args(std::vector<std::string> args, Shebang* sb) {
  for (size_t k = 0; k < args.size(); ++k) {
    const std::string w = args[k];
    auto value = [&](size_t at) {  // an option's value: the rest of the word, else the next one
      if (at < w.size()) return w.substr(at);
      return k + 1 < args.size() ? args[++k] : std::string();
    };
    if (w == "--") {
      ++k;
    } else if (w.rfind("--", 0) == 0) {
      std::string name = w.substr(2, w.find('=') == std::string::npos ? std::string::npos : w.find('=') - 2);
      size_t eq = w.find('=');
      std::string v = eq == std::string::npos ? "" : w.substr(eq + 1);
      bool takes = name == "unset" || name == "chdir" || name == "split-string" || name == "argv0";
      if (takes && eq == std::string::npos) v = k + 1 < args.size() ? args[++k] : "";
      if (name == "ignore-environment") sb->env_cleared = true;
      else if (name == "unset") sb->env_unset.push_back(v);
      else if (name == "split-string") {
        auto more = split_string(v);
        args.insert(args.begin() + static_cast<std::ptrdiff_t>(k) + 1, more.begin(), more.end());
      } else if (!takes && name != "null" && name != "debug" && name.rfind("default-signal", 0) != 0 &&
                 name.rfind("ignore-signal", 0) != 0 && name.rfind("block-signal", 0) != 0 && name != "list-signal-handling") {
        sb->error = "env: unrecognized option '" + w + "'";
        return;
      }
      continue;
    } else if (w.size() > 1 && w[0] == '-') {
      for (size_t i = 1; i < w.size(); ++i) {
        char c = w[i];
        if (c == 'i') {
          sb->env_cleared = true;
        } else if (c == '0' || c == 'v') {
        } else if (c == 'u' || c == 'C' || c == 'a') {
          std::string v = value(i + 1);
          if (c == 'u') sb->env_unset.push_back(v);
          break;
        } else if (c == 'S') {
          auto more = split_string(w.substr(i + 1));
          if (i + 1 == w.size() && k + 1 < args.size()) more = split_string(args[++k]);
          args.insert(args.begin() + static_cast<std::ptrdiff_t>(k) + 1, more.begin(), more.end());
          break;
        } else {
          sb->error = std::string("env: invalid option -- '") + c + "'";
          return;
        }
      }
      continue;
    } else if (w == "-") {
      sb->env_cleared = true;
      continue;
    } else if (w.find('=') != std::string::npos) {
      sb->env_set.push_back(w.substr(0, w.find('=')));
      continue;
    }
    if (k >= args.size()) break;
    sb->program = args[k];
    sb->args.assign(args.begin() + static_cast<std::ptrdiff_t>(k) + 1, args.end());
    return;
  }
}

}  // namespace

std::optional<Shebang> read_shebang(const std::string& head) {
  if (head.rfind("#!", 0) != 0) return std::nullopt;
  size_t nl = head.find('\n');
  std::string line = head.substr(2, nl == std::string::npos ? std::string::npos : nl - 2);
  // As the kernel reads it: the interpreter, then the rest of the line, its
  // blanks trimmed, as one argument.
  size_t a = 0;
  while (a < line.size() && blank(line[a])) ++a;
  size_t b = a;
  while (b < line.size() && !blank(line[b])) ++b;
  Shebang sb;
  sb.program = line.substr(a, b - a);
  size_t c = b, e = line.size();
  while (c < e && blank(line[c])) ++c;
  while (e > c && blank(line[e - 1])) --e;
  std::string arg = line.substr(c, e - c);
  if (sb.program.empty()) return sb;
  if (sb.program.size() >= 4 && sb.program.compare(sb.program.size() - 4, 4, "/env") == 0 && !arg.empty()) {
    // "#!/usr/bin/env [OPTION]... [NAME=VALUE]... PROGRAM": env searches PATH
    // for PROGRAM, in the environment its options and assignments leave.
    Shebang env;
    read_env_args({arg}, &env);
    if (!env.error.empty() || !env.program.empty()) return env;
    return sb;  // env alone, or only assignments: it prints the environment
  }
  if (!arg.empty()) sb.args.push_back(arg);
  return sb;
}

PythonOptions read_python_options(const std::vector<std::string>& options) {
  PythonOptions out;
  for (size_t n = 0; n < options.size(); ++n) {
    const std::string& w = options[n];
    if (w == "--") return out;
    if (w.rfind("--", 0) == 0) {  // --check-hash-based-pycs MODE takes a value; --help and friends none
      if (w == "--check-hash-based-pycs") ++n;
      continue;
    }
    if (w.size() < 2 || w[0] != '-') return out;  // the script (or "-", standard input) ends them
    for (size_t i = 1; i < w.size(); ++i) {
      if (w[i] == 'I' || w[i] == 'E' || w[i] == 'S') out.ignores_pythonpath = true;
      if (w[i] == 's' || w[i] == 'I') out.no_user_site = true;
      if (w[i] == 'c') return out;  // the rest is the command's
      if (w[i] == 'm') {
        out.module = i + 1 < w.size() ? w.substr(i + 1) : n + 1 < options.size() ? options[n + 1] : "";
        return out;
      }
      if (w[i] == 'W' || w[i] == 'X') {  // the option's value: the rest of the word, or the next word
        if (i + 1 == w.size()) ++n;
        break;
      }
    }
  }
  return out;
}

bool python_ignores_pythonpath(const std::vector<std::string>& options) {
  return read_python_options(options).ignores_pythonpath;
}

bool Shebang::changes(const std::string& var) const {
  return env_cleared || std::count(env_unset.begin(), env_unset.end(), var) ||
         std::count(env_set.begin(), env_set.end(), var);
}

}  // namespace memprofile
