// The memory a report or a serve snapshot holds is bounded by the process's
// own memory, whatever the input's shape (#56): a dump of many distinct
// stacks, of deep ones, a MAPPED_LIBRARIES section of many lines, several
// dumps at once, each also written out as pprof. Each case runs the real CLI
// (testing::run_bounded) with a small --max-memory and checks that it either
// answers or refuses in one line naming the file and the ceiling, and that
// its peak RSS stays within the ceiling and what the binary itself maps.
// serve's snapshot path reads the same files through the same readers
// (profile/profiles.h's load_opened_profiles and encode_pprof), under its own
// ceiling: tests/e2e/serve_untrusted_files.sh feeds it a crafted dump from a
// hostile member of a live tree.
#include <catch2/catch.hpp>
#include <string>

#include "support.h"

using testing::Scratch;

namespace {

constexpr long kCeilingMib = 96;
// Beyond the ceiling: the binary's own pages (text, libdw's tables),
// what is allocated between two looks at the ceiling (a few thousand
// records), and glibc's arenas.
constexpr long kSlackMib = 48;

// A jemalloc heap_v2 dump: `stacks` distinct stacks of `frames` frames,
// then `maps` MAPPED_LIBRARIES lines (the first a real file, so that a
// report can name a mapping).
std::string crafted_dump(size_t stacks, size_t frames, size_t maps) {
  std::string d = "heap_v2/524288\n  t*: " + std::to_string(stacks) + ": " + std::to_string(stacks * 4096) + " [0: 0]\n";
  char buf[64];
  for (size_t i = 0; i < stacks; ++i) {
    d += "@";
    for (size_t f = 0; f < frames; ++f) {
      std::snprintf(buf, sizeof buf, " 0x%zx", 0x400000 + i * 16 + f * 0x1000000);
      d += buf;
    }
    d += "\n  t*: 1: 4096 [0: 0]\n";
  }
  d += "MAPPED_LIBRARIES:\n";
  for (size_t m = 0; m < maps; ++m) {
    std::snprintf(buf, sizeof buf, "%zx-%zx r-xp 00000000 08:01 %zu ", 0x400000 + m * 0x2000, 0x401000 + m * 0x2000, m + 1);
    d += buf;
    d += m == 0 ? "/bin/true\n" : "/lib/crafted/lib" + std::to_string(m) + ".so\n";
  }
  return d;
}

void require_within_ceiling(const testing::Bounded& b, const std::string& file) {
  INFO("exit " << b.exit_code << ", peak " << b.max_rss_kb << " KiB; stderr: " << b.err);
  testing::require_bounded(b, (kCeilingMib + kSlackMib) * 1024);
  // Answered, or refused in one line naming the file and the ceiling.
  if (b.exit_code != 0) {
    CHECK(b.exit_code == 2);
    CHECK(b.err.find(file) != std::string::npos);
    CHECK(b.err.find("memory ceiling of " + std::to_string(kCeilingMib) + " MiB") != std::string::npos);
  }
}

testing::Bounded report(const Scratch& s, const std::vector<std::string>& files, bool pprof) {
  std::vector<std::string> args = {"report", "--max-memory", std::to_string(kCeilingMib), "--rootfs", "/"};
  if (pprof) {
    args.push_back("--pprof");
    args.push_back(s / "out.pb.gz");
  }
  args.insert(args.end(), files.begin(), files.end());
  return testing::run_bounded(args, 300);
}

}  // namespace

TEST_CASE("memory ceiling: each shape of dump is read within it, or refused naming the file") {
  Scratch s;
  struct Shape {
    const char* name;
    size_t stacks, frames, maps;
    bool pprof;
  };
  // The shapes that once took 18x their size: 800,000 one-frame stacks
  // (41 MB), 400,000 two-frame stacks written as pprof (24 MB), 300,000
  // mappings; and deep stacks.
  const Shape shapes[] = {
      {"one-frame", 800000, 1, 1, false},
      {"two-frame-pprof", 400000, 2, 1, true},
      {"mappings", 1, 1, 300000, false},
      {"deep", 20000, 128, 1, true},
  };
  for (const Shape& shape : shapes) {
    SECTION(shape.name) {
      const std::string file = s / ("jeprof.4242.0.m0.heap");
      testing::write_file(file, crafted_dump(shape.stacks, shape.frames, shape.maps));
      require_within_ceiling(report(s, {file}, shape.pprof), file);
    }
  }
}

TEST_CASE("memory ceiling: a mix of shapes over several dumps of one process is bounded in all") {
  Scratch s;
  std::vector<std::string> files;
  for (int seq = 0; seq < 3; ++seq) {
    files.push_back(s / ("jeprof.4242." + std::to_string(seq) + ".i" + std::to_string(seq) + ".heap"));
    testing::write_file(files.back(), crafted_dump(150000 + 50000 * seq, 1 + seq, 50000));
  }
  testing::Bounded b = report(s, files, true);
  INFO("exit " << b.exit_code << ", peak " << b.max_rss_kb << " KiB; stderr: " << b.err);
  testing::require_bounded(b, (kCeilingMib + kSlackMib) * 1024);
  if (b.exit_code != 0) {
    CHECK(b.exit_code == 2);
    CHECK(b.err.find("memory ceiling of " + std::to_string(kCeilingMib) + " MiB") != std::string::npos);
  }
}

TEST_CASE("memory ceiling: a dump well within it is read as before") {
  Scratch s;
  const std::string file = s / "jeprof.4242.0.m0.heap";
  testing::write_file(file, crafted_dump(2000, 3, 10));
  testing::Bounded b = report(s, {file}, true);
  INFO("stderr: " << b.err);
  CHECK(b.exit_code == 0);
}
