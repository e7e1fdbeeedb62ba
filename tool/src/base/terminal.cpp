#include "base/terminal.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <streambuf>

namespace memprofile {

namespace {

// The most text held back to go out in one write(2): a pipe's capacity.
// Held longer, a line or a report gains nothing by waiting.
constexpr size_t kOneWrite = 64 * 1024;

bool is_c0(unsigned char c) { return (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f; }
bool is_c1_second(unsigned char c) { return c >= 0x80 && c <= 0x9f; }  // after 0xC2

void append_hex(std::string& out, unsigned char c) {
  static const char hex[] = "0123456789abcdef";
  out += "\\x";
  out += hex[c >> 4];
  out += hex[c & 15];
}

// The rule, over a run of bytes; `pending` holds a 0xC2 whose next byte
// decides whether it starts a C1 control (it may come in the next write).
void escape_into(std::string& out, const char* p, size_t n, bool& pending) {
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(p[i]);
    if (pending) {
      pending = false;
      if (is_c1_second(c)) {
        append_hex(out, 0xc2);
        append_hex(out, c);
        continue;
      }
      out += static_cast<char>(0xc2);
    }
    if (c == 0xc2) {
      pending = true;
    } else if (is_c0(c)) {
      append_hex(out, c);
    } else {
      out += static_cast<char>(c);
    }
  }
}

// A stream buffer in front of another that applies the rule; with
// whole_lines, what it escapes waits in held_ until a newline or a flush.
class EscapingBuf : public std::streambuf {
 public:
  EscapingBuf(std::streambuf* dest, bool whole_lines) : dest_(dest), whole_lines_(whole_lines) {}

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return sync() == 0 ? traits_type::not_eof(c) : c;
    char ch = traits_type::to_char_type(c);
    return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    escape_into(held_, s, static_cast<size_t>(n), pending_);
    // Up to the last newline with whole_lines, unless the text has grown
    // past kOneWrite (waiting gains nothing then); all of it without.
    size_t cut = held_.size();
    if (whole_lines_ && cut < kOneWrite) {
      size_t nl = held_.rfind('\n');
      cut = nl == std::string::npos ? 0 : nl + 1;
    }
    bool ok = put(held_.substr(0, cut));
    held_.erase(0, cut);
    return ok ? n : 0;
  }
  int sync() override {
    if (pending_) {
      pending_ = false;
      held_ += static_cast<char>(0xc2);
    }
    bool ok = put(held_);  // what whole_lines kept, and the held 0xC2
    held_.clear();
    return ok ? dest_->pubsync() : -1;
  }

 private:
  // One call to dest_ for all of `text`: with stdio's unbuffered stderr
  // behind it, one write(2).
  bool put(const std::string& text) {
    if (text.empty()) return true;
    auto len = static_cast<std::streamsize>(text.size());
    return dest_->sputn(text.data(), len) == len;
  }

  std::streambuf* dest_;
  bool whole_lines_;
  std::string held_;  // escaped, not yet handed on (whole_lines: after the last newline)
  bool pending_ = false;
};

}  // namespace

std::string terminal_safe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool pending = false;
  escape_into(out, s.data(), s.size(), pending);
  if (pending) out += static_cast<char>(0xc2);
  return out;
}

std::unique_ptr<std::streambuf> escaping_buffer(std::streambuf* dest, bool whole_lines) {
  return std::make_unique<EscapingBuf>(dest, whole_lines);
}

void escape_terminal_output() {
  // Not to a terminal, standard output goes out in one write(2) of up to
  // 64 KiB when flushed or at exit, not in 4 KiB pieces: a relay that stops
  // reading when the process ends (buildah's RUN step) has a whole report
  // or none of it, never its start alone. Before any output, as setvbuf
  // must be.
  static char out_buffer[kOneWrite];
  if (!isatty(STDOUT_FILENO)) std::setvbuf(stdout, out_buffer, _IOFBF, sizeof out_buffer);
  // Never destroyed: the streams flush through them at exit.
  static auto* out = escaping_buffer(std::cout.rdbuf(), false).release();
  static auto* err = escaping_buffer(std::cerr.rdbuf(), true).release();
  if (std::cout.rdbuf() != out) std::cout.rdbuf(out);
  if (std::cerr.rdbuf() != err) std::cerr.rdbuf(err);
  // unitbuf would flush std::cerr after every `<<`, a line in pieces.
  std::cerr.unsetf(std::ios_base::unitbuf);
}

}  // namespace memprofile
