// Each image source behind the one Store interface: the same image as an OCI
// layout directory, a tar file, a compressed stream and a docker-archive
// reads to the same candidates and the same tree; names are claimed by the
// table in order; and the worker pool stops at the first error.
#include <dirent.h>
#include <fcntl.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <stdexcept>

#include "archive_builder.h"
#include "base/error.h"
#include "base/parallel.h"
#include "archive/collected.h"
#include "archive/tar_writer.h"
#include "source/load.h"
#include "source/manifests.h"
#include "source/kinds.h"

using namespace memprofile;

namespace {

std::string app_layer() {
  return testing::TarWriter()
      .add("usr/", "", '5', 0755)
      .add("usr/bin/", "", '5', 0755)
      .add("usr/bin/app", "#!/bin/sh\n", '0', 0755)
      .add("usr/bin/alias", "", '2', 0777, "app")
      .finish();
}

// The layout directory `dir` as one tar, its entries in a fixed order.
std::string tar_of_layout(const std::string& dir) {
  testing::TarWriter t;
  for (const char* name : {"oci-layout", "index.json"}) t.add(name, testing::read_file(dir + "/" + name));
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir((dir + "/blobs/sha256").c_str()), closedir);
  REQUIRE(d);
  while (struct dirent* e = readdir(d.get()))
    if (e->d_name[0] != '.')
      t.add(std::string("blobs/sha256/") + e->d_name, testing::read_file(dir + "/blobs/sha256/" + e->d_name));
  return t.finish();
}

OpenedSource open(const std::string& name) { return open_source(name, SourceOptions{}); }

std::vector<Candidate> candidates(OpenedSource& s) { return read_candidates(*s.store, s.format); }

std::string tree_listing(const LoadedImage& img) {
  std::string out;
  img.tree->walk("/", [&](const std::string& p) { out += p + "\n"; });
  return out;
}

}  // namespace

TEST_CASE("sources: one image as a layout, a tar file and a gzip stream reads the same") {
  testing::Scratch s;
  testing::OciImage img;
  img.layer(app_layer());
  img.write(s / "layout");
  testing::write_file(s / "image.tar", tar_of_layout(s / "layout"));
  testing::write_file(s / "image.tar.gz", testing::gzip(tar_of_layout(s / "layout")));

  OpenedSource layout = open(s / "layout"), file = open(s / "image.tar"), stream = open(s / "image.tar.gz");
  CHECK(layout.format == "oci-layout");
  CHECK(file.format.empty());
  CHECK(layout.store->parallel());
  CHECK(file.store->parallel());
  CHECK_FALSE(stream.store->parallel());  // read once, as it passes
  for (OpenedSource* o : {&layout, &file, &stream}) {
    CHECK(o->store->has("index.json"));
    CHECK_FALSE(o->store->has("manifest.json"));
    auto c = candidates(*o);
    REQUIRE(c.size() == 1);
    CHECK(c[0].layers.size() == 1);
    CHECK(c[0].platform.architecture.empty());  // the index names none: load_images takes the config's
    LayerSummary sum = o->store->summarize(c[0].layers[0], LayerLimits{});
    CHECK(sum.entries == 4);
  }
  CHECK(candidates(layout)[0].format == "oci-layout");
  CHECK(candidates(file)[0].format == "oci-archive");

  std::string want;
  for (const std::string& name : {s / "layout", s / "image.tar", s / "image.tar.gz"}) {
    auto images = load_images(name, ImageLoadOptions{});
    REQUIRE(images.size() == 1);
    CHECK(images[0].config.platform.architecture == "amd64");
    CHECK(images[0].layers == 1);
    std::string got = tree_listing(images[0]);
    if (want.empty()) want = got;
    CHECK(got == want);
  }
  CHECK(want.find("/usr/bin/app\n") != std::string::npos);
}

TEST_CASE("sources: a docker-archive resolves its names through the archive's links") {
  testing::Scratch s;
  std::string layer = app_layer();
  std::string config = R"({"architecture":"arm64","os":"linux","config":{"Entrypoint":["/usr/bin/app"]},)"
                       R"("rootfs":{"type":"layers","diff_ids":["sha256:)" + sha256_hex(layer) + R"("]}})";
  std::string manifest = R"([{"Config":"config.json","RepoTags":["app:1"],"Layers":["layer/layer.tar"]}])";
  testing::write_file(s / "docker.tar", testing::TarWriter()
                                            .add("manifest.json", manifest)
                                            .add("config.json", config)
                                            .add("blob.tar", layer)
                                            .add("layer/layer.tar", "", '2', 0777, "../blob.tar")
                                            .finish());
  OpenedSource o = open(s / "docker.tar");
  CHECK(o.store->has("layer/layer.tar"));  // a symlink entry, resolved to blob.tar
  auto c = candidates(o);
  REQUIRE(c.size() == 1);
  CHECK(c[0].format == "docker-archive");
  CHECK(c[0].reference == "app:1");
  auto images = load_images(s / "docker.tar", ImageLoadOptions{});
  REQUIRE(images.size() == 1);
  CHECK(images[0].config.entrypoint == std::vector<std::string>{"/usr/bin/app"});
  CHECK(images[0].config.platform.architecture == "arm64");
}

TEST_CASE("sources: the network kinds claim their prefixes before any path") {
  static std::string claimed;
  std::vector<SourceKind> network = {
      {kRegistryPrefix, [](const std::string& n, const SourceOptions&) -> OpenedSource {
         claimed = n;
         throw FileError(n, "the fake registry");
       }}};
  SourceOptions with;
  with.network = &network;
  CHECK_THROWS_WITH(open_source("docker://debian", with), Catch::Contains("the fake registry"));
  CHECK(claimed == "docker://debian");
  // A binary without network kinds reads the name as a path, and says so.
  CHECK_THROWS_WITH(open_source("docker://debian", SourceOptions{}), Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(open_source("docker-daemon:app", with), Catch::Contains("cannot open"));
}

TEST_CASE("sources: a directory that is not a layout, and an empty file, are named") {
  testing::Scratch s;
  testing::make_dirs(s / "root/etc");
  CHECK_THROWS_WITH(open(s / "root"), Catch::Contains("not an OCI image layout") && Catch::Contains("--rootfs"));
  testing::write_file(s / "empty.tar", "");
  CHECK_THROWS_WITH(open(s / "empty.tar"), Catch::Contains("empty file"));
}

TEST_CASE("parallel_for: every item once; the first error stops the pool and the lowest item's is thrown") {
  std::vector<std::atomic<int>> seen(1000);
  parallel_for(seen.size(), 4, [&](size_t i) { ++seen[i]; });
  for (auto& s : seen) CHECK(s.load() == 1);

  std::atomic<size_t> started{0};
  auto fail = [&](size_t i) {
    ++started;
    if (i >= 3) throw std::runtime_error("item " + std::to_string(i));
  };
  CHECK_THROWS_WITH(parallel_for(100000, 1, fail), "item 3");
  CHECK(started.load() == 4);  // one worker: items 0..3, then it stops
  started = 0;
  CHECK_THROWS_WITH(parallel_for(100000, 4, fail), Catch::StartsWith("item "));
  CHECK(started.load() < 100000);
  CHECK(worker_count(3) == 3);
  CHECK(worker_count(0) >= 1);
}

TEST_CASE("collect's tar writer: long names and the manifest read back by the collected reader") {
  testing::Scratch s;
  std::string deep = std::string(120, 'd') + "/jeprof.1.0.heap";
  {
    memprofile::TarWriter out(s / "c.tar");
    out.entry(deep, "heap");
    out.entry(kCollectManifest, R"({"backend":"jemalloc","files":[{"name":")" + deep +
                                    R"(","size":4,"sha256":")" + sha256_hex("heap") + R"("}],"skipped":[]})");
    out.finish();
  }
  std::string bytes = testing::read_file(s / "c.tar");
  CHECK(bytes.size() % 512 == 0);
  MemReader in(bytes.data(), bytes.size());
  std::vector<std::string> seen;
  CollectedArchive a = read_collected(in, "c.tar", [&](const std::string& n, Reader&) { seen.push_back(n); });
  CHECK(a.problems.empty());
  REQUIRE(a.files.size() == 1);
  CHECK(a.files[0].name == deep);  // whole, through its PAX header
  CHECK(a.files[0].mismatch.empty());
  CHECK(a.backend == "jemalloc");
  CHECK(seen == std::vector<std::string>{deep});
}
