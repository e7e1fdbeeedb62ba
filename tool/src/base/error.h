// Errors raised inside the library. main() catches them once and prints
// "memprofile: <message>"; everything below it just throws.
#pragma once

#include <stdexcept>
#include <string>

namespace memprofile {

// A problem with what the user gave us (bad file, bad archive, bad flag).
// Maps to exit code 2.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Errors about one file: the message always starts with the file's name so a
// one-line report says which file and what is wrong.
class FileError : public Error {
 public:
  FileError(const std::string& path, const std::string& what)
      : Error(path + ": " + what), path_(path) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Exit codes, documented in README.md ("The commands") and each command's page in docs/.
enum ExitCode : int {
  kExitOk = 0,           // everything checked is profilable / ready
  kExitNotProfilable = 1,
  kExitError = 2,        // usage, I/O or malformed input
};

}  // namespace memprofile
