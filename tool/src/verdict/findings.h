// The catalogue of findings. Every code is stable (scripts match on it) and
// documented in docs/findings.md; a test keeps the two in step.
#pragma once

#include <string>
#include <vector>

namespace memprofile {

enum class Severity { Error, Warning, Info };
const char* to_string(Severity);

// Where a blocking finding goes when a report lists them as "fix, in this
// order": the base image, then the program, then the preload library, then
// how it is wired, then where the profile goes. Codes without a place come
// after the others, in the order they were found.
constexpr int kNoFixOrder = 1000;

struct FindingSpec {
  const char* code;
  Severity severity;
  const char* fix;  // the default one-line fix
  int fix_order = kNoFixOrder;  // lower is fixed first
};

struct Finding {
  std::string code;
  Severity severity;
  std::string message;  // one line: what is wrong, with the facts
  std::string fix;      // one line: what to change
};

const std::vector<FindingSpec>& finding_catalog();
// Builds a finding from the catalogue; `fix` overrides the default when given.
// Throws std::logic_error for an unknown code (a programming error).
Finding make_finding(const std::string& code, std::string message, std::string fix = {});
// The catalogue's fix order of a code (kNoFixOrder for an unknown one).
int fix_order(const std::string& code);
// Errors first, then warnings, then infos; within each, by fix order, then
// as found (a stable sort).
void sort_by_fix_order(std::vector<Finding>& findings);

}  // namespace memprofile
