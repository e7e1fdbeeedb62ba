// The catalogue of findings. Every code is stable (scripts match on it) and
// documented in docs/findings.md; a test keeps the two in step.
#pragma once

#include <string>
#include <vector>

namespace memprofile {

enum class Severity { Error, Warning, Info };
const char* to_string(Severity);

struct FindingSpec {
  const char* code;
  Severity severity;
  const char* fix;  // the default one-line fix
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

}  // namespace memprofile
