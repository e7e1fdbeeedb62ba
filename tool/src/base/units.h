// Sizes as people read them in status and serve's lines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace memprofile {

// "12.3 MiB": one decimal, binary megabytes.
inline std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace memprofile
