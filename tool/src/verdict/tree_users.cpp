#include "verdict/tree_users.h"

#include <algorithm>
#include <optional>

#include "base/error.h"

namespace memprofile {

namespace {

std::string basename(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// nginx's configuration file: -c FILE (relative to -p PREFIX, else to
// Debian's /etc/nginx/), else /etc/nginx/nginx.conf.
std::string nginx_conf_path(const std::vector<std::string>& argv) {
  std::string conf, prefix;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    auto value = [&](const char* flag) -> std::optional<std::string> {
      if (a == flag && i + 1 < argv.size()) return argv[++i];
      if (a.size() > 2 && a.compare(0, 2, flag) == 0) return a.substr(2);
      return std::nullopt;
    };
    if (auto c = value("-c")) conf = *c;
    else if (auto p = value("-p")) prefix = *p;
  }
  if (conf.empty()) return "/etc/nginx/nginx.conf";
  if (conf[0] == '/') return conf;
  if (prefix.empty()) prefix = "/etc/nginx/";
  return prefix + (prefix.back() == '/' ? "" : "/") + conf;
}

// The `user` directive at the top level of nginx's configuration ("" when
// there is none): its statements split at ';', '{' and '}', comments
// dropped. Bounded by the text's size.
std::string nginx_user(const std::string& text) {
  int depth = 0;
  std::vector<std::string> words;
  std::string word;
  auto end_word = [&] {
    if (!word.empty()) words.push_back(word);
    word.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
      end_word();
      continue;
    }
    if (c == ';' || c == '{' || c == '}') {
      end_word();
      if (c == ';' && depth == 0 && words.size() >= 2 && words[0] == "user") {
        std::string u = words[1];
        u.erase(std::remove(u.begin(), u.end(), '"'), u.end());
        u.erase(std::remove(u.begin(), u.end(), '\''), u.end());
        return u;
      }
      depth += c == '{' ? 1 : c == '}' ? -1 : 0;
      words.clear();
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
      end_word();
    else
      word += c;
  }
  return "";
}

}  // namespace

std::vector<TreeUser> program_users(const FileTree& tree, const std::string& program,
                                    const std::vector<std::string>& argv, uint32_t starting_uid) {
  std::vector<TreeUser> out;
  if (starting_uid != 0 || basename(program) != "nginx") return out;
  const std::string conf = nginx_conf_path(argv);
  std::optional<std::string> text;
  try {
    text = tree.read(conf, 1 << 20);
  } catch (const Error&) {
  }
  std::string name = text ? nginx_user(*text) : "";
  std::string from = "nginx's `user` in " + conf;
  if (name.empty()) {
    name = "nobody";  // nginx's own default when its master runs as root
    from = "nginx's default user (no `user` in " + conf + ")";
  }
  TreeUser u{name, {}, from};
  std::string error;
  if (resolve_user(tree, name, &u.ids, &error)) out.push_back(std::move(u));
  return out;
}

bool can_write_dir(const struct stat& st, const UserIds& ids) {
  if (ids.uid == 0) return true;
  const mode_t need_other = S_IWOTH | S_IXOTH, need_group = S_IWGRP | S_IXGRP, need_owner = S_IWUSR | S_IXUSR;
  if (st.st_uid == ids.uid) return (st.st_mode & need_owner) == need_owner;
  bool in_group = st.st_gid == ids.gid || std::find(ids.groups.begin(), ids.groups.end(), st.st_gid) != ids.groups.end();
  if (in_group) return (st.st_mode & need_group) == need_group;
  return (st.st_mode & need_other) == need_other;
}

}  // namespace memprofile
