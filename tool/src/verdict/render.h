// Rendering of verdicts: check's per-file results and preflight's per-image
// ones, each as a human report (colour only on a terminal) and as JSON with
// the same content. The JSON shapes are documented in docs/check.md and
// docs/preflight.md.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

#include "image/image.h"
#include "verdict/checker.h"
#include "verdict/preflight.h"

namespace memprofile {

nlohmann::json to_json(const FileVerdict& r);
nlohmann::json to_json(const Finding& f);
nlohmann::json to_json(const PythonFacts& py);
void print_human(std::ostream& out, const FileVerdict& r, bool color);
void print_finding(std::ostream& out, const Finding& f, bool color, const char* indent = "  ");

// preflight's verdict on one image.
nlohmann::json to_json(const LoadedImage& img, const PreflightResult& r);
void print_preflight(std::ostream& out, const LoadedImage& img, const PreflightResult& r, bool color);

// ANSI colours, or nothing when `on` is false.
struct Style {
  bool on;
  const char* red() const { return on ? "\033[31m" : ""; }
  const char* green() const { return on ? "\033[32m" : ""; }
  const char* yellow() const { return on ? "\033[33m" : ""; }
  const char* bold() const { return on ? "\033[1m" : ""; }
  const char* dim() const { return on ? "\033[2m" : ""; }
  const char* reset() const { return on ? "\033[0m" : ""; }
};

}  // namespace memprofile
