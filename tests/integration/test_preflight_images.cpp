// Integration tier: real images built with buildah. The cases on synthetic inputs are
// tests/unit/test_preflight.cpp.
// preflight over real images built with buildah (tests/fixtures/images.sh)
// and over hand-built hostile archives.
#include <sys/stat.h>
#include <zstd.h>

#include <fstream>
#include <set>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "archive_builder.h"
#include "checks.h"
#include "support.h"

using nlohmann::json;
using testing::run_memprofile;
using testing::OciImage;
using testing::RunResult;
using testing::codes;
using testing::has;
using testing::preflight_json;
using testing::require_one_line_error;
using testing::Scratch;
using testing::TarWriter;

namespace {

std::string image(const std::string& name) { return testing::images() + "/" + name; }

const std::string kElfApp() { return testing::read_file(testing::fixture("dynamic")); }

}  // namespace

TEST_CASE("preflight: a dynamic glibc app on Debian is READY in all three formats") {
  for (const char* fmt : {".docker.tar", ".oci.tar", ".oci"}) {
    INFO(fmt);
    json j = preflight_json({image(std::string("ready") + fmt), "--preload", "/usr/local/lib/libjemalloc.so"}, 0);
    CHECK(j["verdict"] == "READY");
    CHECK(j["program"] == "/usr/local/bin/app");
    CHECK(j["preload"]["backend"] == "jemalloc");
    CHECK(j["target"]["root"]["glibc_available"] == "GLIBC_2.36");
    CHECK(j["blocking"].empty());
  }
  CHECK(preflight_json({image("ready.docker.tar")}, 0)["format"] == "docker-archive");
  CHECK(preflight_json({image("ready.oci.tar")}, 0)["format"] == "oci-archive");
  CHECK(preflight_json({image("ready.oci")}, 0)["format"] == "oci-layout");
}

TEST_CASE("preflight: standard input, plain and gzip-compressed, non-seekable") {
  for (const char* filter : {"cat", "gzip -1 -c"}) {
    RunResult r = testing::run(std::string(filter) + " " + testing::quote(image("ready.docker.tar")) + " | " +
                               testing::quote(testing::memprofile_bin()) + " preflight --json -");
    INFO(filter << ": " << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(json::parse(r.out)["verdict"] == "READY");
  }
}

TEST_CASE("preflight: the human report leads with the verdict") {
  RunResult r = run_memprofile({"preflight", image("scratch-dispatcher.docker.tar")});
  CHECK(r.exit_code == 1);
  auto l = testing::lines(r.out);
  REQUIRE(l.size() > 2);
  CHECK_THAT(l[1], Catch::StartsWith("NOT PROFILABLE"));
  CHECK_THAT(l[2], Catch::StartsWith("  1. STATIC_PIE"));
}

TEST_CASE("preflight: numaflow-like scratch image with a static-pie dispatcher") {
  json j = preflight_json({image("scratch-dispatcher.oci.tar")}, 1);
  CHECK(j["verdict"] == "NOT PROFILABLE");
  CHECK(j["blocking"][0] == "STATIC_PIE");
  std::vector<std::string> dispatched;
  for (const auto& d : j["dispatch"]) dispatched.push_back(d["path"]);
  std::sort(dispatched.begin(), dispatched.end());
  CHECK(dispatched == std::vector<std::string>{"/bin/numaflow", "/bin/numaflow-rs"});
  for (const auto& d : j["dispatch"]) CHECK(d["profilable"] == false);
  json t = preflight_json({image("scratch-dispatcher.oci.tar"), "--target", "/bin/numaflow-rs"}, 1);
  CHECK(t["target"]["path"] == "/bin/numaflow-rs");
  CHECK(t["blocking"][0] == "STATIC_PIE");
  CHECK_THAT(t["findings"][0]["fix"].get<std::string>(), Catch::Contains("-crt-static"));
}

TEST_CASE("preflight: LD_PRELOAD in the image env names an arm64 library on amd64") {
  json j = preflight_json({image("wrong-arch.docker.tar")}, 1);
  CHECK(j["blocking"] == json::array({"PRELOAD_WRONG_ARCH"}));
  CHECK(has(j, "LD_PRELOAD_IN_IMAGE_ENV"));
  CHECK(j["preload"]["path"] == "/usr/lib/libbytehound.so");
}

TEST_CASE("preflight: a preload library needing a newer glibc than the image's") {
  json j = preflight_json({image("new-glibc.oci"), "--preload", "/usr/local/lib/libjemalloc.so"}, 1);
  CHECK(j["blocking"] == json::array({"PRELOAD_GLIBC_TOO_NEW"}));
  CHECK_THAT(j["findings"][0]["message"].get<std::string>(), Catch::Contains("GLIBC_2.99") && Catch::Contains("GLIBC_2.36"));
}

TEST_CASE("preflight: setuid target with USER nobody") {
  json j = preflight_json({image("setuid-nobody.oci.tar")}, 1);
  CHECK(has(j, "SETUID_AS_USER"));
  CHECK(j["target"]["setuid"] == true);
}

TEST_CASE("preflight: musl program with its loader on scratch") {
  json j = preflight_json({image("musl.docker.tar")}, 1);
  CHECK(j["blocking"] == json::array({"MUSL_LIBC"}));
  CHECK(j["target"]["root"]["interpreter_found"] == true);
}

TEST_CASE("preflight: #! entrypoint through /usr/bin/env is followed to its interpreter") {
  json j = preflight_json({image("script.oci")}, 0);
  CHECK(j["scripts"] == json::array({"/usr/local/bin/start.sh"}));
  CHECK(j["program"] == "/usr/bin/bash");
  CHECK(has(j, "ENTRYPOINT_SCRIPT"));
  CHECK(j["dispatch"].empty());
}

TEST_CASE("preflight: a later layer's whiteout deletes libc") {
  json j = preflight_json({image("whiteout.oci.tar")}, 1);
  CHECK(j["blocking"] == json::array({"LIBC_MISSING"}));
}

TEST_CASE("preflight: a later layer deletes the preload library's directory") {
  json j = preflight_json({image("opaque.docker.tar"), "--preload", "/usr/local/lib/libjemalloc.so"}, 1);
  CHECK(j["blocking"] == json::array({"PRELOAD_NOT_FOUND"}));
}

TEST_CASE("preflight: bytehound under a dynamic dispatcher without TRACK_CHILD_PROCESSES") {
  json j = preflight_json({image("bytehound-chain.oci.tar"), "--target", "/usr/local/bin/app"}, 1);
  CHECK(j["blocking"][0] == "BYTEHOUND_CHILD_UNTRACKED");
  CHECK(has(j, "OUTPUT_DIR_NOT_WRITABLE"));
  CHECK(has(j, "LD_PRELOAD_IN_IMAGE_ENV"));
  json d = preflight_json({image("bytehound-chain.oci.tar")}, 1);
  CHECK(d["dispatch"][0]["path"] == "/usr/local/bin/app");
  CHECK(has(d, "BYTEHOUND_CHILD_UNTRACKED"));
}

TEST_CASE("preflight: multi-platform manifest list") {
  RunResult all = run_memprofile({"preflight", "--json", "--all-platforms", image("multi.oci.tar")});
  REQUIRE(all.exit_code == 0);
  auto l = testing::lines(all.out);
  REQUIRE(l.size() == 2);
  std::set<std::string> arches;
  for (const auto& line : l) arches.insert(json::parse(line)["target"]["arch"].get<std::string>());
  CHECK(arches == std::set<std::string>{"x86_64", "aarch64"});
  CHECK(preflight_json({image("multi.oci"), "--platform", "linux/arm64"}, 0)["target"]["arch"] == "aarch64");
  CHECK(preflight_json({image("multi.oci")}, 0)["target"]["arch"] == "x86_64");  // the host's
  RunResult none = run_memprofile({"preflight", "--platform", "linux/s390x", image("multi.oci.tar")});
  require_one_line_error(none, "linux/amd64");
  CHECK_THAT(none.err, Catch::Contains("linux/arm64"));
}

TEST_CASE("preflight: a path under /proc, /sys or /dev is never a program the entrypoint dispatches to") {
  // Rust's std names /proc/self/exe; under --rootfs / (an image build's
  // verify step) it is memprofile itself. Here each is a real program file,
  // beside a path that is one of the image's.
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(testing::fixture("dynamic"), s / "usr/local/bin/app");
  for (const char* p : {"proc/self/exe", "sys/kernel/prog", "dev/prog", "usr/local/bin/other"})
    testing::copy_file(testing::fixture("dynamic"), s / p);
  {
    std::ofstream app(s / "usr/local/bin/app", std::ios::binary | std::ios::app);
    app << std::string("\0/proc/self/exe\0/sys/kernel/prog\0/dev/prog\0/usr/local/bin/other\0", 64);
  }
  json j = preflight_json({"--rootfs", s.path(), "--entrypoint", "/usr/local/bin/app"}, 0);
  REQUIRE(j["dispatch"].size() == 1);
  CHECK(j["dispatch"][0]["path"] == "/usr/local/bin/other");
}

TEST_CASE("preflight: --rootfs judges a directory with config from flags") {
  Scratch s;
  testing::make_glibc_root(s.path());
  testing::copy_file(testing::fixture("dynamic"), s / "usr/local/bin/app");
  testing::copy_file(testing::fixture("fake_preload.so"), s / "usr/local/lib/libjemalloc.so", 0644);
  json ok = preflight_json({"--rootfs", s.path(), "--entrypoint", "[\"app\"]", "--env",
                            "PATH=/usr/local/bin:/usr/bin", "--preload", "/usr/local/lib/libjemalloc.so"}, 0);
  CHECK(ok["program"] == "/usr/local/bin/app");
  testing::make_dirs(s / "data");
  json bad = preflight_json({"--rootfs", s.path(), "--entrypoint", "/usr/local/bin/app", "--env",
                             "MALLOC_CONF=prof:true,prof_prefix:/data/jeprof", "--env", "LD_PRELOAD=/usr/local/lib/libjemalloc.so",
                             "--user", "4242:4242"}, 1);
  CHECK(has(bad, "OUTPUT_DIR_NOT_WRITABLE"));
  json unknown = preflight_json({"--rootfs", s.path(), "--entrypoint", "/usr/local/bin/app", "--user", "nosuchuser"}, 1);
  CHECK(has(unknown, "USER_UNKNOWN"));
  // A numeric uid with no passwd entry runs with gid 0 (runc, Docker,
  // podman): a root-group 0770 directory is writable for it.
  REQUIRE(chmod((s / "data").c_str(), 0770) == 0);
  json group0 = preflight_json({"--rootfs", s.path(), "--entrypoint", "/usr/local/bin/app", "--env",
                                "MALLOC_CONF=prof:true,prof_prefix:/data/jeprof", "--env",
                                "LD_PRELOAD=/usr/local/lib/libjemalloc.so", "--user", "1000"}, 0);
  CHECK_FALSE(has(group0, "OUTPUT_DIR_NOT_WRITABLE"));
}

// A root like the images images/ builds: the static launcher as entrypoint,
// the app's own command in /etc/memprofile/exec.conf.
void make_launcher_root(const Scratch& s, const std::string& conf) {
  testing::make_glibc_root(s.path());
  testing::copy_file(testing::fixture("dynamic"), s / "usr/local/bin/app");
  testing::copy_file(testing::launcher_bin(), s / "usr/bin/memprofile");
  testing::copy_file(testing::fixture("fake_preload.so"), s / "usr/lib/memprofile/libjemalloc.so.2", 0644);
  testing::make_dirs(s / "var/memprofile");
  testing::write_file(s / "etc/memprofile/exec.conf", conf);
}
const char* kLauncherEntrypoint = "[\"/usr/bin/memprofile\",\"exec\",\"--from-config\",\"--\"]";

TEST_CASE("preflight: what breaks a memprofile exec entrypoint") {
  Scratch s;
  make_launcher_root(s, "backend = jemalloc\noutput_dir = /profiles\nentrypoint = [\"/usr/local/bin/app\"]\n");
  json missing = preflight_json({"--rootfs", s.path(), "--entrypoint", kLauncherEntrypoint}, 1);
  CHECK(missing["blocking"] == json({"OUTPUT_DIR_MISSING"}));
  // The image's ENV overrides the config, as the launcher's environment does.
  json env = preflight_json({"--rootfs", s.path(), "--entrypoint", kLauncherEntrypoint, "--env",
                             "MEMPROFILE_OUTPUT_DIR=/var/memprofile"}, 0);
  CHECK(env["launcher"]["output_dir"] == "/var/memprofile");
  json unknown = preflight_json({"--rootfs", s.path(), "--entrypoint",
                                 "[\"/usr/bin/memprofile\",\"exec\",\"--colour\",\"--\",\"/usr/local/bin/app\"]"}, 1);
  CHECK(has(unknown, "LAUNCHER_CONFIG"));
  testing::write_file(s / "etc/memprofile/exec.conf", "entrypoint = /usr/local/bin/app\n");
  json bad = preflight_json({"--rootfs", s.path(), "--entrypoint", kLauncherEntrypoint}, 1);
  CHECK(bad["blocking"] == json({"LAUNCHER_CONFIG"}));
  testing::write_file(s / "etc/memprofile/exec.conf", "backend = jemalloc\nentrypoint = [\"/usr/local/bin/app\"]\n");
  testing::copy_file(testing::launcher_arm64_bin(), s / "usr/bin/memprofile");
  json arch = preflight_json({"--rootfs", s.path(), "--entrypoint", kLauncherEntrypoint}, 1);
  CHECK(arch["blocking"] == json({"LAUNCHER_WRONG_ARCH"}));
}

TEST_CASE("preflight: the users nginx's configuration makes its workers, against the profile's directory") {
  // nginx started as root runs its workers as its `user`: with LD_PRELOAD
  // in Env nothing gives them a directory they can write; under memprofile
  // exec each gets a subdirectory of its own (the control library's).
  Scratch s;
  make_launcher_root(s, "backend = jemalloc\noutput_dir = /var/memprofile\nentrypoint = [\"/usr/sbin/nginx\"]\n");
  testing::copy_file(testing::fixture("dynamic"), s / "usr/sbin/nginx");
  testing::write_file(s / "etc/nginx/nginx.conf", "user www-data;\nevents {}\n");
  testing::write_file(s / "etc/passwd", "root:x:0:0::/root:/bin/sh\nwww-data:x:33:33::/var/www:/usr/sbin/nologin\n");
  testing::write_file(s / "etc/group", "root:x:0:\nwww-data:x:33:\n");
  testing::copy_file(testing::fixture("fake_preload.so"), s / "usr/local/lib/libjemalloc.so", 0644);
  testing::make_dirs(s / "data");
  json bare = preflight_json({"--rootfs", s.path(), "--entrypoint", "/usr/sbin/nginx", "--env",
                              "MALLOC_CONF=prof:true,prof_prefix:/data/jeprof", "--env",
                              "LD_PRELOAD=/usr/local/lib/libjemalloc.so"}, 1);
  CHECK(bare["blocking"] == json({"OUTPUT_DIR_NOT_WRITABLE"}));
  CHECK_THAT(bare.dump(), Catch::Contains("uid 33 (www-data, nginx's `user` in /etc/nginx/nginx.conf)"));
  json launched = preflight_json({"--rootfs", s.path(), "--entrypoint", kLauncherEntrypoint}, 0);
  CHECK(has(launched, "OUTPUT_DIR_PER_PROCESS"));
  CHECK_FALSE(has(launched, "OUTPUT_DIR_NOT_WRITABLE"));
  REQUIRE(chmod((s / "var/memprofile").c_str(), 01777) == 0);
  json open = preflight_json({"--rootfs", s.path(), "--entrypoint", kLauncherEntrypoint}, 0);
  CHECK_FALSE(has(open, "OUTPUT_DIR_PER_PROCESS"));
}

TEST_CASE("flatten: an opaque directory hides lower layers only") {
  Scratch s;
  OciImage img;
  img.entrypoint_json = "[\"/app\"]";
  img.layer(TarWriter().add("app", kElfApp(), '0', 0755).add("opt/", "", '5', 0755).add("opt/lower.so", "x").finish());
  // The marker comes after a file of its own layer: that file must stay.
  img.layer(TarWriter().add("opt/upper.so", "y").add("opt/.wh..wh..opq", "").finish());
  img.write(s / "img");
  json j = preflight_json({s / "img", "--preload", "/opt/lower.so"}, 1);
  CHECK(has(j, "PRELOAD_NOT_FOUND"));
  json k = preflight_json({s / "img", "--preload", "/opt/upper.so"}, 1);
  CHECK_FALSE(has(k, "PRELOAD_NOT_FOUND"));
  CHECK(has(k, "PRELOAD_NOT_ELF"));
}

TEST_CASE("flatten: a whiteout does not delete a file of its own layer") {
  Scratch s;
  OciImage img;
  img.layer(TarWriter().add("app", kElfApp(), '0', 0755).finish());
  img.layer(TarWriter().add("lib.so", "z").add(".wh.lib.so", "").add(".wh.app", "").finish());
  img.write(s / "img");
  json j = preflight_json({s / "img", "--preload", "/lib.so"}, 1);
  CHECK(has(j, "ENTRYPOINT_MISSING"));  // app came from a lower layer: deleted
  CHECK_FALSE(has(j, "PRELOAD_NOT_FOUND"));
}

TEST_CASE("flatten: a hard link into a lower layer carries the ELF facts") {
  Scratch s;
  OciImage img;
  img.entrypoint_json = "[\"/bin/linked\"]";
  img.layer(TarWriter().add("usr/bin/real", testing::read_file(testing::fixture("static-pie")), '0', 0755).finish());
  img.layer(TarWriter().add("bin/linked", "", '1', 0755, "usr/bin/real").finish());
  img.write(s / "img");
  json j = preflight_json({s / "img"}, 1);
  CHECK(j["target"]["linkage"] == "static-pie");
}

TEST_CASE("hostile: path traversal entries are ignored and reported") {
  Scratch s;
  OciImage img;
  img.layer(TarWriter().add("../../../../tmp/escaped", "x").add("app", kElfApp(), '0', 0755).finish());
  img.write(s / "img");
  json j = preflight_json({s / "img"}, 1);
  REQUIRE(j["anomalies"].size() == 1);
  CHECK_THAT(j["anomalies"][0].get<std::string>(), Catch::Contains("climbs out of the image root"));
}

TEST_CASE("hostile: an absolute symlink to /etc resolves inside the image") {
  Scratch s;
  OciImage img;
  img.entrypoint_json = "[\"/app\"]";
  img.layer(TarWriter().add("etc/real-app", testing::read_file(testing::fixture("static")), '0', 0755)
                .add("app", "", '2', 0777, "/etc/real-app")
                .finish());
  img.write(s / "img");
  json j = preflight_json({s / "img"}, 1);
  CHECK(j["program"] == "/etc/real-app");
  CHECK(j["target"]["linkage"] == "static");
}

TEST_CASE("hostile: hard links to a missing or escaping target") {
  Scratch s;
  OciImage img;
  img.layer(TarWriter().add("app", kElfApp(), '0', 0755).add("a", "", '1', 0644, "nope").add("b", "", '1', 0644, "../../etc/passwd").finish());
  img.write(s / "img");
  json j = preflight_json({s / "img"}, 1);
  std::string all = j["anomalies"].dump();
  CHECK_THAT(all, Catch::Contains("target missing"));
  CHECK_THAT(all, Catch::Contains("escapes the image root"));
}

TEST_CASE("hostile: truncated gzip layer") {
  Scratch s;
  OciImage img;
  img.layer(TarWriter().add("app", kElfApp(), '0', 0755).finish());
  img.layers[0] = img.layers[0].substr(0, img.layers[0].size() / 2);
  img.write(s / "img");
  require_one_line_error(run_memprofile({"preflight", s / "img"}), "truncated gzip");
}

TEST_CASE("hostile: missing layer blob, digest and diff_id mismatches") {
  Scratch s;
  OciImage missing;
  missing.drop_first_layer_blob = true;
  missing.layer(TarWriter().add("app", kElfApp(), '0', 0755).finish());
  missing.write(s / "missing");
  require_one_line_error(run_memprofile({"preflight", s / "missing"}), "missing");

  OciImage tampered;
  tampered.corrupt_layer_digest = true;
  tampered.layer(TarWriter().add("app", kElfApp(), '0', 0755).finish());
  tampered.write(s / "tampered");
  require_one_line_error(run_memprofile({"preflight", s / "tampered"}), "digest mismatch");

  OciImage diff;
  diff.corrupt_diff_id = true;
  diff.layer(TarWriter().add("app", kElfApp(), '0', 0755).finish());
  diff.write(s / "diff");
  require_one_line_error(run_memprofile({"preflight", s / "diff"}), "diff_id mismatch");
}

TEST_CASE("hostile: malformed JSON config and index") {
  Scratch s;
  OciImage img;
  img.layer(TarWriter().add("app", kElfApp(), '0', 0755).finish());
  img.config_override = "{\"config\": {\"Entrypoint\": [\"/app\"";
  img.write(s / "img");
  require_one_line_error(run_memprofile({"preflight", s / "img"}), "malformed JSON");
  OciImage ok;
  ok.layer(TarWriter().add("app", kElfApp(), '0', 0755).finish());
  ok.write(s / "idx");
  testing::write_file(s / "idx/index.json", "{\"manifests\": 7}");
  require_one_line_error(run_memprofile({"preflight", s / "idx"}), "no \"manifests\" array");
}

TEST_CASE("layers: zstd and uncompressed layers read like gzip ones") {
  Scratch s;
  std::string tar = TarWriter().add("app", testing::read_file(testing::fixture("static")), '0', 0755).finish();
  std::string z(ZSTD_compressBound(tar.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), tar.data(), tar.size(), 3));
  OciImage img;
  img.layer_tars = {tar};
  img.layers = {z};
  img.write(s / "zstd");
  CHECK(preflight_json({s / "zstd"}, 1)["target"]["linkage"] == "static");
  OciImage plain;
  plain.layer(tar, false);
  plain.write(s / "plain");
  CHECK(preflight_json({s / "plain"}, 1)["target"]["linkage"] == "static");
}

TEST_CASE("docker >= 25 archive: manifest.json supplies layers the OCI manifest's blobs lack (moby#47065)") {
  Scratch s;
  std::string elf = testing::read_file(testing::fixture("static"));
  std::string tar = TarWriter().add("app", elf, '0', 0755).finish();
  std::string layer = testing::gzip(tar);
  std::string missing = OciImage::digest(layer + "not exported");
  std::string config = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Entrypoint\":[\"/app\"]},"
                       "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" + OciImage::digest(tar) + "\"]}}";
  std::string manifest = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
                         "\"config\":{\"digest\":\"" + OciImage::digest(config) + "\"},\"layers\":[{\"digest\":\"" +
                         missing + "\"}]}";
  std::string dir = s / "archive";
  OciImage writer;
  writer.write_blob(dir, layer);
  writer.write_blob(dir, config);
  writer.write_blob(dir, manifest);
  testing::write_file(dir + "/oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}");
  testing::write_file(dir + "/index.json", "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci."
                                           "image.manifest.v1+json\",\"digest\":\"" + OciImage::digest(manifest) + "\"}]}");
  testing::write_file(dir + "/manifest.json", "[{\"Config\":\"blobs/sha256/" + OciImage::digest(config).substr(7) +
                                                  "\",\"RepoTags\":[\"app:latest\"],\"Layers\":[\"blobs/sha256/" +
                                                  OciImage::digest(layer).substr(7) + "\"]}]");
  REQUIRE(testing::run("tar -C " + testing::quote(dir) + " -cf " + testing::quote(s / "docker25.tar") + " .").exit_code == 0);
  json j = preflight_json({s / "docker25.tar"}, 1);
  CHECK(j["format"] == "docker-archive");
  CHECK(j["target"]["linkage"] == "static");
  CHECK(j["blocking"] == json::array({"STATIC_BINARY"}));
}
TEST_CASE("preflight: a memprofile exec entrypoint is judged by the program it starts") {
  Scratch s;
  make_launcher_root(s, "backend = jemalloc\nentrypoint = [\"/usr/local/bin/app\"]\ncmd = [\"--serve\"]\n");
  json j = preflight_json({"--rootfs", s.path(), "--entrypoint", kLauncherEntrypoint}, 0);
  CHECK(j["program"] == "/usr/local/bin/app");
  CHECK(j["argv"] == json({"/usr/local/bin/app", "--serve"}));
  CHECK(j["launcher"]["backend"] == "jemalloc");
  CHECK(j["preload"]["path"] == "/usr/lib/memprofile/libjemalloc.so.2");
  CHECK(has(j, "LAUNCHER"));
  CHECK_FALSE(has(j, "NO_PRELOAD"));
  // Arguments after "--" replace the config's cmd, as at run time.
  json args = preflight_json({"--rootfs", s.path(), "--entrypoint", kLauncherEntrypoint, "--cmd", "[\"--other\"]"}, 0);
  CHECK(args["argv"] == json({"/usr/local/bin/app", "--other"}));
  // Flags on the entrypoint win over the config, as in the launcher.
  json flag = preflight_json({"--rootfs", s.path(), "--entrypoint",
                              "[\"/usr/bin/memprofile\",\"exec\",\"--preload\",\"/nope.so\",\"--\",\"/usr/local/bin/app\"]"}, 1);
  CHECK(has(flag, "PRELOAD_NOT_FOUND"));
  // A global option before the subcommand is still the launcher.
  json verbose = preflight_json({"--rootfs", s.path(), "--entrypoint",
                                 "[\"/usr/bin/memprofile\",\"-v\",\"exec\",\"--from-config\",\"--\"]"}, 0);
  CHECK(verbose["program"] == "/usr/local/bin/app");
  CHECK(verbose["launcher"]["backend"] == "jemalloc");
}

TEST_CASE("preflight --trace-loader: the root's own loader maps the preload library") {
  Scratch s;
  make_launcher_root(s, "backend = jemalloc\nentrypoint = [\"/usr/local/bin/app\"]\n");
  RunResult elsewhere = run_memprofile({"preflight", "--rootfs", s.path(), "--trace-loader", "--entrypoint", kLauncherEntrypoint});
  CHECK(elsewhere.exit_code == 2);
  CHECK_THAT(elsewhere.err, Catch::Contains("--trace-loader") && Catch::Contains("--rootfs / only"));
  // Sanitizer builds have no static launcher to run inside the root: known
  // from the build itself, so that the normal build never skips this part.
#if defined(__SANITIZE_ADDRESS__)
  WARN("the launcher is not static in a sanitizer build: the chroot run is left to the normal build");
  return;
#endif
  REQUIRE_THAT(run_memprofile({"check", testing::launcher_bin()}).out, Catch::Contains(", static"));
  // Inside the root, as a Dockerfile RUN step is (chroot: the tests run as root).
  RunResult r = testing::run("chroot " + testing::quote(s.path()) + " /usr/bin/memprofile preflight --json --rootfs / --trace-loader "
                             "--entrypoint " + testing::quote(kLauncherEntrypoint));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  json j = json::parse(r.out);
  CHECK(has(j, "LOADER_TRACED"));
}

// ---- hand-built images ------------------------------------------------------

