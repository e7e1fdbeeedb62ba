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

// The exit codes of every command, documented in README.md ("The commands")
// and each command's page in docs/ (check.md, preflight.md, launcher.md).
// main() returns them; nothing else picks a number.
enum class ExitCode : int {
  Ok = 0,              // everything checked is profilable / ready / attached / matches
  NotProfilable = 1,   // not profilable, not attached, an archive that does not match its manifest
  InputError = 2,      // usage, I/O or malformed input (an Error caught in main())
  Refused = 3,         // exec refused to start the program (--strict, or its command is unknown)
  CannotExecute = 126, // exec: the program was found but cannot be executed
  NotFound = 127,      // exec: the program is not found
};
constexpr int to_int(ExitCode code) { return static_cast<int>(code); }

}  // namespace memprofile
