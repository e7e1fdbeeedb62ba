#include "verdict/python_target.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "base/error.h"

namespace memprofile {

std::string to_string(const PythonVersion& v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor) + v.abiflags;
}

namespace {

// "3.13" at the start of `s` (after `at`), with where it ends.
std::optional<PythonVersion> dotted(const std::string& s, size_t at, size_t* end) {
  size_t i = at;
  auto number = [&](int* out) {
    size_t from = i;
    int n = 0;
    while (i < s.size() && i - from < 3 && s[i] >= '0' && s[i] <= '9') n = n * 10 + (s[i++] - '0');
    *out = n;
    return i > from;
  };
  PythonVersion v;
  if (!number(&v.major) || i >= s.size() || s[i] != '.') return std::nullopt;
  ++i;
  if (!number(&v.minor)) return std::nullopt;
  *end = i;
  return v;
}

std::string base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// python3.13, python3.13t (free-threaded), python3.13d (debug).
std::optional<PythonVersion> from_program_name(const std::string& name) {
  if (name.rfind("python", 0) != 0) return std::nullopt;
  size_t end = 0;
  auto v = dotted(name, 6, &end);
  if (!v || v->major < 2) return std::nullopt;
  for (size_t i = end; i < name.size(); ++i)
    if (name[i] < 'a' || name[i] > 'z') return std::nullopt;
  v->abiflags = name.substr(end);
  return v;
}

// libpython3.13.so.1.0, libpython3.13t.so.1.0
std::optional<PythonVersion> from_libpython(const std::string& needed) {
  if (needed.rfind("libpython", 0) != 0) return std::nullopt;
  size_t end = 0;
  auto v = dotted(needed, 9, &end);
  size_t so = needed.find(".so", end);
  if (!v || so == std::string::npos) return std::nullopt;
  v->abiflags = needed.substr(end, so - end);
  for (char c : v->abiflags)
    if (c < 'a' || c > 'z') return std::nullopt;
  return v;
}

bool is_dir(const FileTree& tree, const std::string& path, std::string* canonical) {
  auto r = try_resolve(tree, path);
  if (!r || r->node.kind != FsNode::Kind::Directory) return false;
  *canonical = r->path;
  return true;
}

std::string tags_of(const std::vector<std::string>& files) {
  std::string out;
  for (const auto& f : files) out += (out.empty() ? "" : ", ") + base_name(f);
  return out;
}

}  // namespace

std::optional<PythonVersion> python_version(const std::string& path, const ElfInfo& elf) {
  if (auto v = from_program_name(base_name(path))) return v;
  for (const auto& n : elf.needed)
    if (auto v = from_libpython(n)) return v;
  return std::nullopt;
}

std::optional<ExtensionTag> extension_tag(const std::string& file_name) {
  // NAME.cpython-313[t]-TRIPLET.so
  size_t at = file_name.find(".cpython-");
  if (at == std::string::npos || file_name.size() < 3 || file_name.compare(file_name.size() - 3, 3, ".so") != 0)
    return std::nullopt;
  size_t i = at + 9, from = i;
  while (i < file_name.size() && file_name[i] >= '0' && file_name[i] <= '9') ++i;
  if (i - from < 2 || i - from > 4) return std::nullopt;
  ExtensionTag tag;
  tag.version.major = file_name[from] - '0';
  tag.version.minor = std::stoi(file_name.substr(from + 1, i - from - 1));
  size_t flags = i;
  while (i < file_name.size() && file_name[i] >= 'a' && file_name[i] <= 'z') ++i;  // t, d
  tag.version.abiflags = file_name.substr(flags, i - flags);
  if (i < file_name.size() && file_name[i] == '-') {
    size_t end = file_name.size() - 3;
    tag.triplet = i + 1 < end ? file_name.substr(i + 1, end - i - 1) : "";
  }
  return tag;
}

// lib/python3.13 (debug builds share it), lib/python3.13t (free-threaded).
std::string lib_dir_name(const PythonVersion& v) {
  return "python" + std::to_string(v.major) + "." + std::to_string(v.minor) +
         (v.abiflags.find('t') != std::string::npos ? "t" : "");
}

std::vector<std::string> site_dirs(const std::string& interpreter, const PythonVersion& v, const std::string& pythonpath) {
  std::vector<std::string> dirs;
  std::set<std::string> seen;
  auto add = [&](const std::string& d) {
    if (!d.empty() && d[0] == '/' && seen.insert(d).second) dirs.push_back(d);
  };
  for (size_t i = 0; i <= pythonpath.size();) {
    size_t j = pythonpath.find(':', i);
    if (j == std::string::npos) j = pythonpath.size();
    add(pythonpath.substr(i, j - i));
    i = j + 1;
  }
  const std::string pyver = lib_dir_name(v);
  // sys.prefix: the interpreter's bin/ directory's parent.
  std::string bin = dirname_of(interpreter);
  std::string prefix = dirname_of(bin);
  if (prefix == "/") prefix = "";
  add(prefix + "/lib/" + pyver + "/site-packages");
  // Debian's: /usr/local first, then the packages' own.
  add("/usr/local/lib/" + pyver + "/dist-packages");
  add("/usr/lib/python3/dist-packages");
  add("/usr/lib/" + pyver + "/dist-packages");
  return dirs;
}

namespace {

// The venv `invoked` (an interpreter's path as named) belongs to: its
// prefix and pyvenv.cfg's "key = value" lines, keys lower-cased; nullopt
// when there is none.
struct Venv {
  std::string prefix;  // "" for /
  std::map<std::string, std::string> cfg;
};
std::optional<Venv> venv_of(const FileTree& tree, const std::string& invoked) {
  if (invoked.empty() || invoked[0] != '/') return std::nullopt;
  Venv v;
  v.prefix = dirname_of(dirname_of(invoked));
  if (v.prefix == "/") v.prefix = "";
  std::optional<std::string> text;
  try {
    text = tree.read(v.prefix + "/pyvenv.cfg", 16384);
  } catch (const Error&) {
  }
  if (!text) return std::nullopt;
  auto trim = [](std::string x) {
    while (!x.empty() && std::isspace(static_cast<unsigned char>(x.back()))) x.pop_back();
    size_t b = 0;
    while (b < x.size() && std::isspace(static_cast<unsigned char>(x[b]))) ++b;
    return x.substr(b);
  };
  for (size_t at = 0; at < text->size();) {
    size_t nl = text->find('\n', at);
    std::string line = text->substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? text->size() : nl + 1;
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = trim(line.substr(0, eq));
    for (auto& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    v.cfg[key] = trim(line.substr(eq + 1));
  }
  return v;
}

}  // namespace

std::vector<std::string> venv_dirs(const FileTree& tree, const std::string& invoked, const PythonVersion& v,
                                   bool* with_base) {
  *with_base = true;
  auto venv = venv_of(tree, invoked);
  if (!venv) return {};
  std::string include = venv->cfg["include-system-site-packages"];
  for (auto& c : include) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  *with_base = include.empty() || include == "true";  // site.py's default: true
  return {venv->prefix + "/lib/" + lib_dir_name(v) + "/site-packages"};
}

std::string base_interpreter(const FileTree& tree, const std::string& interpreter, const std::string& invoked,
                             const PythonVersion& v) {
  auto venv = venv_of(tree, invoked);
  if (!venv) return interpreter;
  std::string home = venv->cfg["home"];
  while (home.size() > 1 && home.back() == '/') home.pop_back();
  if (home.empty() || home[0] != '/') return interpreter;
  return home + "/python" + std::to_string(v.major) + "." + std::to_string(v.minor) + v.abiflags;
}

PythonInstall python_install(const FileTree& tree, const std::string& interpreter, const std::string& invoked,
                             const PythonVersion& v) {
  PythonInstall in;
  // The headers are the base installation's (sysconfig's installed_base).
  std::string prefix = dirname_of(dirname_of(base_interpreter(tree, interpreter, invoked, v)));
  if (prefix == "/") prefix = "";
  const std::string mm = std::to_string(v.major) + "." + std::to_string(v.minor);
  std::string canonical;
  bool with_base = false;
  auto exists = [&](const std::string& path) {
    auto r = try_resolve(tree, path);
    return r && r->node.kind == FsNode::Kind::Regular;
  };
  // Debian's interpreters, and Ubuntu's, search /usr/local's dist-packages,
  // never the prefix's site-packages: their python3.X-minimal ships
  // /etc/python3.X/sitecustomize.py, present with the minimal package alone.
  bool debian_layout = prefix == "/usr" && (exists("/etc/python" + mm + "/sitecustomize.py") ||
                                            is_dir(tree, "/usr/lib/python3/dist-packages", &canonical));
  if (auto venv = venv_dirs(tree, invoked, v, &with_base); !venv.empty())
    in.site_packages = venv.front();
  else if (debian_layout)
    in.site_packages = "/usr/local/lib/" + lib_dir_name(v) + "/dist-packages";
  else
    in.site_packages = prefix + "/lib/" + lib_dir_name(v) + "/site-packages";
  // As the image resolves it (its links followed there, never here).
  in.include_dir = prefix + "/include/python" + mm + v.abiflags;
  if (is_dir(tree, in.include_dir, &canonical)) {
    in.include_dir = canonical;
    in.headers = exists(in.include_dir + "/Python.h");
  }
  return in;
}

std::optional<PythonVersion> venv_version(const FileTree& tree, const std::string& invoked) {
  auto venv = venv_of(tree, invoked);
  if (!venv) return std::nullopt;
  // Its base interpreter's name (executable = /usr/bin/python3.13t) says the
  // build too; "version = 3.13.5" the version alone.
  if (auto v = from_program_name(base_name(venv->cfg["executable"]))) return v;
  size_t end = 0;
  if (auto v = dotted(venv->cfg["version"], 0, &end)) return v;
  return dotted(venv->cfg["version_info"], 0, &end);  // virtualenv's, uv's
}

std::string passwd_home(const FileTree& tree, uint32_t uid) {
  std::optional<std::string> text;
  try {
    text = tree.read("/etc/passwd", 1 << 20);
  } catch (const Error&) {
  }
  if (!text) return "";
  const std::string id = std::to_string(uid);
  for (size_t at = 0; at < text->size();) {
    size_t nl = text->find('\n', at);
    std::string line = text->substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? text->size() : nl + 1;
    std::vector<std::string> cols;
    for (size_t i = 0; i <= line.size() && cols.size() < 7;) {
      size_t j = line.find(':', i);
      if (j == std::string::npos) j = line.size();
      cols.push_back(line.substr(i, j - i));
      i = j + 1;
    }
    if (cols.size() >= 6 && cols[2] == id) return cols[5];
  }
  return "";
}

std::string python_user_base(const std::vector<std::string>& options, const std::string& nousersite,
                             const std::string& userbase, const std::string& home) {
  if (read_python_options(options).no_user_site || !nousersite.empty()) return "";
  if (!userbase.empty()) return userbase;
  return home.empty() || home[0] != '/' ? "" : (home == "/" ? "" : home) + "/.local";
}

std::vector<Finding> find_memray(const FileTree& tree, const std::string& invoked, const std::string& interpreter,
                                 const ElfInfo& elf, const std::string& pythonpath, MemrayFound* found,
                                 const std::string& user_base) {
  std::vector<Finding> problems;
  auto version = python_version(interpreter, elf);
  if (!version) version = venv_version(tree, invoked);  // a venv's copy named "python"
  if (!version) {
    problems.push_back(make_finding("MEMRAY_NOT_PYTHON", interpreter + " is not a CPython interpreter (its name is not "
                                                                       "python3.N and it links no libpython)"));
    return problems;
  }
  const std::string want_triplet = multiarch_triplet(elf.machine, elf.elf_class);
  // PYTHONPATH's, a venv's own, then (unless the venv leaves them out) the
  // base interpreter's.
  bool with_base = true;
  std::vector<std::string> venv = venv_dirs(tree, invoked, *version, &with_base);
  std::vector<std::string> dirs;
  // site.py adds the user's site-packages before the prefixes' (a venv
  // without the system's turns it off: it counts as the base's below).
  std::string user_site = user_base.empty() ? "" : user_base + "/lib/" + lib_dir_name(*version) + "/site-packages";
  std::string path_list = pythonpath + ":" + user_site;
  for (const auto& d : venv) path_list += ":" + d;
  for (const auto& d : site_dirs(interpreter, *version, path_list)) {
    bool base = std::find(venv.begin(), venv.end(), d) == venv.end() &&
                (pythonpath.empty() || (":" + pythonpath + ":").find(":" + d + ":") == std::string::npos);
    if (with_base || !base) dirs.push_back(d);
  }
  std::string searched;
  for (const auto& d : dirs) searched += (searched.empty() ? "" : ", ") + d;
  for (const auto& d : dirs) {
    std::string package;
    if (!is_dir(tree, d + "/memray", &package)) continue;
    // Python imports the first memray on sys.path: this one, right or wrong.
    found->package = package;
    std::vector<std::string> extensions, other_arch;
    try {
      tree.walk(package, [&](const std::string& f) {
        if (dirname_of(f) == package && base_name(f).rfind("_memray.", 0) == 0 &&
            f.compare(f.size() - 3, 3, ".so") == 0)
          extensions.push_back(f);
      });
    } catch (const Error&) {
    }
    for (const auto& e : extensions) {
      auto tag = extension_tag(base_name(e));
      if (!tag || !(tag->version == *version)) continue;
      if (!tag->triplet.empty() && !want_triplet.empty() && tag->triplet != want_triplet) {
        other_arch.push_back(e);
        continue;
      }
      found->extension = e;
      return problems;
    }
    const std::string who = interpreter + " (Python " + to_string(*version) + ", " + machine_name(elf.machine) + ")";
    if (!other_arch.empty())
      problems.push_back(make_finding("MEMRAY_WRONG_ARCH", "memray in " + package + " is built for another architecture (" +
                                                               tags_of(other_arch) + ") than " + who));
    else if (!extensions.empty())
      problems.push_back(make_finding("MEMRAY_WRONG_PYTHON", "memray in " + package + " is built for another Python (" +
                                                                 tags_of(extensions) + ") than " + who));
    else
      problems.push_back(make_finding("MEMRAY_MISSING", "memray in " + package + " has no compiled extension (_memray.*.so) "
                                                                                 "for " + who));
    return problems;
  }
  problems.push_back(make_finding("MEMRAY_MISSING", "memray is not importable by " + interpreter + " (Python " +
                                                        to_string(*version) + "): no memray package in " + searched));
  return problems;
}

bool drops_bootstrap(const Shebang& sb) {
  return sb.changes("PYTHONPATH") || sb.changes("MEMPROFILE_MEMRAY_DIR") || sb.changes("MEMPROFILE_MEMRAY_TARGET");
}

std::vector<Finding> bootstrap_problems(const std::string& interpreter, const std::vector<std::string>& options,
                                        const std::string& env_script) {
  std::vector<Finding> problems;
  PythonOptions po = read_python_options(options);
  if (po.ignores_pythonpath)
    problems.push_back(make_finding("MEMRAY_BOOTSTRAP_IGNORED",
                                    interpreter + " runs with -I, -E or -S, which skip PYTHONPATH or site: memprofile's "
                                                  "bootstrap would never load"));
  if (!env_script.empty())
    problems.push_back(make_finding("MEMRAY_BOOTSTRAP_IGNORED",
                                    env_script + "'s #! line runs env with -i, -u or an assignment that drops "
                                                 "PYTHONPATH or memprofile's variables: its bootstrap would never load"));
  if (po.module == "memray" || po.module.rfind("memray.", 0) == 0)
    problems.push_back(make_finding("MEMRAY_APP_TRACKER",
                                    interpreter + " runs python -m " + po.module + ", memray's own tracker: with "
                                    "memprofile's it would fail (\"No more than one Tracker instance can be active\")"));
  return problems;
}

}  // namespace memprofile
