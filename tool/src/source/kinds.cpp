#include "source/kinds.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "image/file_tree.h"

namespace memprofile {

namespace {

// Standard input: a tar stream, compressed or not, read in one pass.
OpenedSource open_stdin(const SourceOptions& opts) {
  FdReader raw(0, "stdin");
  std::unique_ptr<Reader> unpacked = decompress(raw, "stdin", opts.limits.max_tar_bytes);
  return {read_tar_stream(*unpacked, "stdin", opts.limits), ""};
}

OpenedSource open_directory(const std::string& dir) {
  HostTree probe(dir);
  auto r = resolve(probe, "/oci-layout");
  if (!r || r->node.kind != FsNode::Kind::Regular)
    throw FileError(dir, "a directory but not an OCI image layout (no oci-layout file); for a plain root "
                         "filesystem use --rootfs");
  return {open_oci_layout(dir), "oci-layout"};
}

// A tar file is read by offset; a compressed one is read to its end here,
// in one pass, while its descriptor is open.
OpenedSource open_file(const std::string& path, const SourceOptions& opts) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  unsigned char head[4] = {0, 0, 0, 0};
  ssize_t got = pread(fd.get(), head, sizeof head, 0);
  bool compressed = got >= 2 && ((head[0] == 0x1f && head[1] == 0x8b) || (got == 4 && head[0] == 0x28 && head[1] == 0xb5));
  if (got <= 0) throw FileError(path, "empty file");
  if (!compressed) return {open_tar_file(std::move(fd), path), ""};
  FdReader raw(fd.get(), path);
  std::unique_ptr<Reader> unpacked = decompress(raw, path, opts.limits.max_tar_bytes);
  return {read_tar_stream(*unpacked, path, opts.limits), ""};
}

OpenedSource open_path(const std::string& path, const SourceOptions& opts) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  return S_ISDIR(st.st_mode) ? open_directory(path) : open_file(path, opts);
}

}  // namespace

OpenedSource open_source(const std::string& name, const SourceOptions& opts) {
  if (opts.network)
    for (const SourceKind& kind : *opts.network)
      if (name.compare(0, kind.prefix.size(), kind.prefix) == 0) return kind.open(name, opts);
  if (name == "-") return open_stdin(opts);
  return open_path(name, opts);
}

}  // namespace memprofile
