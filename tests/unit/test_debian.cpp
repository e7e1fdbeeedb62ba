// An image's Debian package database as the memray image build reads it:
// dpkg's status (and distroless' status.d), the release's codename, and
// whether the interpreter preflight judged is Debian's.
#include <catch2/catch.hpp>

#include "elf_builder.h"
#include "image/debian.h"
#include "image/file_tree.h"
#include "support.h"

using namespace memprofile;
using testing::Scratch;

TEST_CASE("dpkg status: installed packages only, with the fields apt needs") {
  auto pkgs = parse_dpkg_status(
      "Package: libc6\nStatus: install ok installed\nPriority: required\nArchitecture: amd64\nMulti-Arch: same\n"
      "Version: 2.41-12\nDescription: GNU C Library\n continued line: not a field\n\n"
      "Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n\n"
      "Package: python3.13-minimal\nStatus: install ok installed\nArchitecture: amd64\nVersion: 3.13.5-2\n"
      "Provides: python3.13-x\n");
  REQUIRE(pkgs.size() == 2);
  CHECK(pkgs[0].name == "libc6");
  CHECK(pkgs[0].version == "2.41-12");
  CHECK(pkgs[0].multi_arch == "same");
  CHECK(pkgs[1].provides == "python3.13-x");
  // The stanza whole, for a status apt reads.
  CHECK(pkgs[0].stanza.rfind("Package: libc6\nStatus: install ok installed\n", 0) == 0);
  CHECK(pkgs[0].stanza.find(" continued line: not a field") != std::string::npos);
}

TEST_CASE("dpkg status: a held or half-configured package is in the image; one removed to its config files is not") {
  auto pkgs = parse_dpkg_status(
      "Package: libc6\nStatus: hold ok installed\nVersion: 2.41-12+deb13u1\n\n"
      "Package: tzdata\nStatus: install ok half-configured\nVersion: 2025b\n\n"
      "Package: old\nStatus: deinstall ok config-files\nVersion: 1\n\n"
      "Package: never\nStatus: purge ok not-installed\n");
  REQUIRE(pkgs.size() == 2);
  CHECK(pkgs[0].name == "libc6");
  // dpkg's own Status goes to apt as it is: a hold stays a hold.
  CHECK(pkgs[0].stanza.find("Status: hold ok installed") != std::string::npos);
  CHECK(pkgs[1].name == "tzdata");
}

TEST_CASE("dpkg status: a stanza without Status (distroless' status.d) is installed; a damaged text is no package") {
  auto distroless = parse_dpkg_status("Package: tzdata\nVersion: 2025b\nArchitecture: all\n");
  REQUIRE(distroless.size() == 1);
  CHECK(distroless[0].stanza == "Status: install ok installed\nPackage: tzdata\nVersion: 2025b\nArchitecture: all");
  CHECK(parse_dpkg_status("\n\n\n: : :\nPackage\n\n").empty());
  CHECK(parse_dpkg_status("").empty());
}

TEST_CASE("debian_system: status, status.d, the release's id and codename (quoted, CRLF); none without a dpkg database") {
  Scratch s;
  HostTree none(s.path());
  CHECK_FALSE(debian_system(none));

  testing::write_file(s / "var/lib/dpkg/status", "Package: base-files\nStatus: install ok installed\nVersion: 13.8\n", 0644);
  testing::write_file(s / "var/lib/dpkg/status.d/libssl3", "Package: libssl3\nVersion: 3.5.1-1\n", 0644);
  testing::write_file(s / "var/lib/dpkg/status.d/libssl3.md5sums", "abc  usr/lib/libssl.so.3\n", 0644);
  testing::write_file(s / "etc/os-release",
                      "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\r\nID=debian\r\nVERSION_CODENAME='trixie'\r\n", 0644);
  HostTree tree(s.path());
  auto sys = debian_system(tree);
  REQUIRE(sys);
  CHECK(sys->codename == "trixie");
  CHECK(sys->id == "debian");
  CHECK(sys->complete);
  REQUIRE(sys->installed.size() == 2);
  CHECK(sys->find("libssl3"));
  CHECK_FALSE(sys->find("abc"));
}
