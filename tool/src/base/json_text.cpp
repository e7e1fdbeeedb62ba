#include "base/json_text.h"

#include <algorithm>

#include "base/error.h"

#include <cstdio>

namespace memprofile {

namespace {

// The length of the valid UTF-8 sequence at s[i], or 0 (RFC 3629: no
// overlong forms, no surrogates, nothing past U+10FFFF).
size_t utf8_length(const std::string& s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  auto cont = [&](size_t k) { return k < s.size() && (byte(k) & 0xC0) == 0x80; };
  unsigned char c = byte(i);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(i + 1) || !cont(i + 2)) return 0;
    unsigned char d = byte(i + 1);
    if (c == 0xE0 && d < 0xA0) return 0;  // overlong
    if (c == 0xED && d > 0x9F) return 0;  // a surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    unsigned char d = byte(i + 1);
    if (c == 0xF0 && d < 0x90) return 0;  // overlong
    if (c == 0xF4 && d > 0x8F) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

void append_string(std::string& out, const std::string& s) {
  char esc[8];
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = utf8_length(s, i);
    if (n == 0) {
      std::snprintf(esc, sizeof esc, "\\udc%02x", c);
      out += esc;
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s, i, n);
      i += n;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          std::snprintf(esc, sizeof esc, "\\u%04x", c);
          out += esc;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

void append(std::string& out, const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += ',';
        first = false;
        append_string(out, it.key());
        out += ':';
        append(out, it.value());
      }
      out += '}';
      break;
    }
    case nlohmann::json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& v : j) {
        if (!first) out += ',';
        first = false;
        append(out, v);
      }
      out += ']';
      break;
    }
    case nlohmann::json::value_t::string: append_string(out, j.get_ref<const std::string&>()); break;
    default: out += j.dump(); break;  // numbers, booleans, null
  }
}

}  // namespace

std::string json_text(const nlohmann::json& j) {
  std::string out;
  append(out, j);
  return out;
}

namespace {

// Counts values and depth, and stops at the first limit crossed.
class Counter : public nlohmann::json_sax<nlohmann::json> {
 public:
  using number_integer_t = nlohmann::json::number_integer_t;
  using number_unsigned_t = nlohmann::json::number_unsigned_t;
  using number_float_t = nlohmann::json::number_float_t;
  using string_t = nlohmann::json::string_t;
  using binary_t = nlohmann::json::binary_t;
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t&) override { return value(); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }
  explicit Counter(size_t max_values = kMaxJsonValues) : max_values_(std::min(max_values, kMaxJsonValues)) {}
  std::string error, limit;
  size_t values() const { return values_; }

 private:
  bool value() {
    if (++values_ <= max_values_) return true;
    limit = "more than " + std::to_string(max_values_) + " JSON values (memprofile's limit)";
    return false;
  }
  bool open() {
    if (++depth_ > kMaxJsonDepth) {
      limit = "JSON nested more than " + std::to_string(kMaxJsonDepth) + " levels deep (memprofile's limit)";
      return false;
    }
    return value();
  }
  bool close() {
    --depth_;
    return true;
  }
  size_t max_values_, values_ = 0, depth_ = 0;
};

std::string without_prefix(const std::string& what) {
  // nlohmann prefixes "[json.exception.parse_error.101] "; keep the rest,
  // but not its "; last read: '...'": that quotes the file, which may be
  // anything a link led to (a secret), not JSON of ours.
  size_t b = what.find("] ");
  std::string rest = b == std::string::npos ? what : what.substr(b + 2);
  size_t quoted = rest.find("; last read: ");
  return quoted == std::string::npos ? rest : rest.substr(0, quoted);
}

}  // namespace

nlohmann::json parse_json_bounded(const std::string& text, const std::string& name) {
  return parse_json_bounded(text, name, kMaxJsonValues);
}

nlohmann::json parse_json_bounded(const std::string& text, const std::string& name, size_t max_values, size_t* values) {
  Counter counter(max_values);
  nlohmann::json::sax_parse(text, &counter);
  if (values) *values = counter.values();
  if (!counter.limit.empty()) throw FileError(name, counter.limit);
  if (!counter.error.empty()) throw FileError(name, "malformed JSON: " + without_prefix(counter.error));
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw FileError(name, "malformed JSON: " + without_prefix(e.what()));
  }
}

nlohmann::json parse_json_document(const std::string& text, const std::string& name) {
  nlohmann::json j = parse_json_bounded(text, name);
  if (!j.is_object() && !j.is_array()) throw FileError(name, "malformed JSON: not an object");
  return j;
}

std::string json_string_or(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::vector<std::string> json_string_list(const nlohmann::json& j, const char* key, const std::string& name) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_array()) throw FileError(name, std::string("\"") + key + "\" is not an array of strings");
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string()) throw FileError(name, std::string("\"") + key + "\" is not an array of strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace memprofile
