// Text for a terminal. Names memprofile prints come from images, profiles
// and processes it does not trust (file names, symbols, module paths,
// environment values): a control character in one would reach the
// terminal raw and could move the cursor, retitle the window or clear the
// screen (ESC ] 0 ; ..., ESC [ 2 J). Every text output is filtered once, at
// the stream, so no subcommand can forget: C0 controls but newline and tab,
// DEL, and C1 controls (U+0080 to U+009F in UTF-8) are written as \xHH.
// JSON output is unchanged by it: JSON escapes these itself.
#pragma once

#include <string>

namespace memprofile {

// `s` with its control characters written as \xHH (newline and tab kept).
std::string terminal_safe(const std::string& s);

// From now on std::cout and std::cerr write through terminal_safe's rule.
// Binary output (collect's tar on standard output) goes to the fd, not to
// these streams, and is not touched.
void escape_terminal_output();

}  // namespace memprofile
