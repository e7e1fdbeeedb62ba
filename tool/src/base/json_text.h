// JSON text for names that come from files: a path in an image, a program's
// argv, a symlink target are bytes, not necessarily UTF-8. nlohmann's dump()
// throws on invalid UTF-8, and a lossy replacement would hide which file was
// meant, so every byte that is not part of valid UTF-8 is written as the
// escape \udcXX (U+DC00 + the byte: Python's "surrogateescape", PEP 383).
// Valid UTF-8 passes through unchanged. Reading it back with
// json.loads(...) and .encode("utf-8", "surrogateescape") restores the bytes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace memprofile {

// `j` as compact JSON text (one line), strings escaped as above.
std::string json_text(const nlohmann::json& j);

// JSON from a file (a manifest, an index, a config): parsed only after a
// counting pass (SAX, no tree) finds at most kMaxJsonValues values nested at
// most kMaxJsonDepth deep. A document tree costs tens of bytes per value, so
// a 4 MiB file of "[0,0,..." or "[[[[..." would otherwise take 100 MB.
// Throws FileError naming `name` on malformed JSON or past a limit.
constexpr size_t kMaxJsonValues = 1u << 17;  // real configs hold a few thousand
constexpr size_t kMaxJsonDepth = 128;        // real ones nest under 10
nlohmann::json parse_json_bounded(const std::string& text, const std::string& name);
// The same within `max_values` (at most kMaxJsonValues); `values`, when
// given, gets how many the text held.
nlohmann::json parse_json_bounded(const std::string& text, const std::string& name, size_t max_values,
                                  size_t* values = nullptr);

// The same, for a document that must be an object or an array (a manifest,
// an index, a config).
nlohmann::json parse_json_document(const std::string& text, const std::string& name);

// j[key] when it is a string, else "".
std::string json_string_or(const nlohmann::json& j, const char* key);

// j[key] as a list of strings: absent or null is empty; anything but an
// array of strings is a FileError naming `name`.
std::vector<std::string> json_string_list(const nlohmann::json& j, const char* key, const std::string& name);


}  // namespace memprofile
