// Text for a terminal. Names memprofile prints come from images, profiles
// and processes it does not trust (file names, symbols, module paths,
// environment values): a control character in one would reach the
// terminal raw and could move the cursor, retitle the window or clear the
// screen (ESC ] 0 ; ..., ESC [ 2 J). Every text output is filtered once, at
// the stream, so no subcommand can forget: C0 controls but newline and tab,
// DEL, and C1 controls (U+0080 to U+009F in UTF-8) are written as \xHH.
// JSON output is unchanged by it: JSON escapes these itself.
#pragma once

#include <memory>
#include <streambuf>
#include <string>

namespace memprofile {

// `s` with its control characters written as \xHH (newline and tab kept).
std::string terminal_safe(const std::string& s);

// A stream buffer in front of `dest` that applies terminal_safe's rule.
// With `whole_lines`, it hands `dest` whole lines, each in one call (and
// keeps a line's start until its newline or a flush): a line then reaches
// a pipe in one write(2), so an exec relay (buildah run, kubectl exec) that
// stops reading when the process ends, or another process writing to the
// same pod log, never cuts or splits it.
std::unique_ptr<std::streambuf> escaping_buffer(std::streambuf* dest, bool whole_lines);

// From now on std::cout and std::cerr write through terminal_safe's rule,
// and std::cerr writes whole lines (flushed at each newline, not after each
// `<<`). Standard output, when not a terminal, is written in one write(2)
// of up to 64 KiB at a flush or at exit. Binary output (collect's tar on
// standard output) goes to the fd, not to these streams, and is not touched.
void escape_terminal_output();

}  // namespace memprofile
