// Path resolution confined to a root: symlinks absolute and relative, "..",
// loops, and nothing ever escaping.
#include <catch2/catch.hpp>

#include "base/error.h"
#include "image/file_tree.h"
#include "support.h"

using namespace memprofile;
using testing::Scratch;

TEST_CASE("normalize_path folds dots and clamps at the root") {
  CHECK(normalize_path("/a/./b/../c") == "/a/c");
  CHECK(normalize_path("/../../etc") == "/etc");
  CHECK(normalize_path("//a//b/") == "/a/b");
  CHECK(normalize_path("/") == "/");
}

TEST_CASE("absolute symlink resolves inside the root, not on the host") {
  Scratch s;
  testing::write_file(s / "usr/lib/x86_64-linux-gnu/ld.so", "inside");
  testing::symlink_to("/usr/lib/x86_64-linux-gnu/ld.so", s / "usr/lib64/ld-linux-x86-64.so.2");
  testing::symlink_to("usr/lib64", s / "lib64");
  HostTree tree(s.path());
  auto r = resolve(tree, "/lib64/ld-linux-x86-64.so.2");
  REQUIRE(r);
  CHECK(r->path == "/usr/lib/x86_64-linux-gnu/ld.so");
  CHECK(r->node.kind == FsNode::Kind::Regular);
}

TEST_CASE("symlink to /etc/passwd means the root's /etc/passwd") {
  Scratch s;
  testing::write_file(s / "etc/passwd", "root-of-image\n");
  testing::symlink_to("/etc/passwd", s / "app/passwd");
  HostTree tree(s.path());
  auto r = resolve(tree, "/app/passwd");
  REQUIRE(r);
  CHECK(r->path == "/etc/passwd");
  CHECK(tree.read(r->path, 100).value() == "root-of-image\n");
}

TEST_CASE("relative symlink climbing with .. is clamped at the root") {
  Scratch s;
  testing::write_file(s / "secret", "in-root");
  testing::symlink_to("../../../../../../secret", s / "a/b/link");
  HostTree tree(s.path());
  auto r = resolve(tree, "/a/b/link");
  REQUIRE(r);
  CHECK(r->path == "/secret");
}

TEST_CASE("a link to a host-only path is missing, not the host's file") {
  Scratch s;
  testing::make_dirs(s / "usr");
  testing::symlink_to("/proc/self/exe", s / "usr/evil");
  HostTree tree(s.path());
  CHECK_FALSE(resolve(tree, "/usr/evil"));
}

TEST_CASE("symlink loop is an error naming the path") {
  Scratch s;
  testing::symlink_to("b", s / "bin/a");
  testing::symlink_to("a", s / "bin/b");
  HostTree tree(s.path());
  CHECK_THROWS_WITH(resolve(tree, "/bin/a"), Catch::Contains("too many levels of symbolic links"));
}

TEST_CASE("a file used as a directory is an error") {
  Scratch s;
  testing::write_file(s / "file", "x");
  HostTree tree(s.path());
  CHECK_THROWS_WITH(resolve(tree, "/file/below"), Catch::Contains("is not a directory"));
}

TEST_CASE("missing components resolve to nothing") {
  Scratch s;
  HostTree tree(s.path());
  CHECK_FALSE(resolve(tree, "/no/such/file"));
}

TEST_CASE("final symlink is kept when asked not to follow it") {
  Scratch s;
  testing::write_file(s / "target", "x");
  testing::symlink_to("target", s / "link");
  HostTree tree(s.path());
  auto r = resolve(tree, "/link", false);
  REQUIRE(r);
  CHECK(r->path == "/link");
  CHECK(r->node.kind == FsNode::Kind::Symlink);
}

TEST_CASE("walk lists regular files depth-first and skips symlinks") {
  Scratch s;
  testing::write_file(s / "b/2", "x");
  testing::write_file(s / "a/1", "x");
  testing::write_file(s / "top", "x");
  testing::symlink_to("/top", s / "a/link");
  HostTree tree(s.path());
  std::vector<std::string> seen;
  tree.walk("/", [&](const std::string& p) { seen.push_back(p); });
  CHECK(seen == std::vector<std::string>{"/top", "/a/1", "/b/2"});
}

TEST_CASE("a relative path is walked from the working directory, as the kernel does") {
  Scratch s;
  testing::write_file(s / "work/app", "x", 0755);
  testing::write_file(s / "app/work", "wrong", 0755);
  HostTree tree(s.path());
  auto r = resolve(tree, "./app", true, "/work");
  REQUIRE(r);
  CHECK(r->path == "/work/app");
  auto up = resolve(tree, "../work/app", true, "/app");
  REQUIRE(up);
  CHECK(up->path == "/work/app");
}
