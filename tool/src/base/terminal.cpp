#include "base/terminal.h"

#include <iostream>
#include <streambuf>

namespace memprofile {

namespace {

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

// A stream buffer in front of another that applies the rule.
class EscapingBuf : public std::streambuf {
 public:
  explicit EscapingBuf(std::streambuf* dest) : dest_(dest) {}

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return sync() == 0 ? traits_type::not_eof(c) : c;
    char ch = traits_type::to_char_type(c);
    return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    scratch_.clear();
    escape_into(scratch_, s, static_cast<size_t>(n), pending_);
    auto len = static_cast<std::streamsize>(scratch_.size());
    return dest_->sputn(scratch_.data(), len) == len ? n : 0;
  }
  int sync() override {
    if (pending_) {
      pending_ = false;
      dest_->sputc(static_cast<char>(0xc2));
    }
    return dest_->pubsync();
  }

 private:
  std::streambuf* dest_;
  std::string scratch_;
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

void escape_terminal_output() {
  // Never destroyed: the streams flush through them at exit.
  static auto* out = new EscapingBuf(std::cout.rdbuf());
  static auto* err = new EscapingBuf(std::cerr.rdbuf());
  if (std::cout.rdbuf() != out) std::cout.rdbuf(out);
  if (std::cerr.rdbuf() != err) std::cerr.rdbuf(err);
}

}  // namespace memprofile
