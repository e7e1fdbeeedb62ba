// Images straight from a Docker daemon (`docker-daemon:NAME[:TAG]`, skopeo's
// transport syntax), over the Engine API: GET /images/{name}/get answers
// with what `docker save` writes (a docker-archive with an OCI layout inside
// since Docker 25), which load_images reads as it arrives with the one-pass
// stream reader, as it reads standard input. Nothing is written to disk.
// The daemon is found the way the docker CLI finds it: DOCKER_HOST, else
// the current context (DOCKER_CONTEXT, else config.json's currentContext),
// else unix:///var/run/docker.sock.
#pragma once

#include <memory>
#include <string>

#include "base/stream.h"
#include "network/http.h"

namespace memprofile {

// Where the Engine API is, and how to talk to it.
struct DaemonEndpoint {
  std::string host;         // as configured: "unix:///var/run/docker.sock", "tcp://h:2376"
  std::string from;         // where `host` came from, for messages: "DOCKER_HOST", "context NAME", "the default"
  std::string unix_socket;  // the socket's path for unix://, else ""
  std::string base_url;     // "http://docker" over the socket, "http(s)://h:p" over TCP
  TlsOptions tls;
};

// The endpoint the docker CLI would use. Throws Error for an endpoint it
// cannot reach (ssh://, a context whose files are missing).
DaemonEndpoint daemon_endpoint();

// The name the API is asked for: NAME as given, with ":latest" added when it
// has neither tag nor digest (docker saves every tag of a bare name; skopeo
// and `docker run` mean latest). Throws Error for an empty or malformed name.
std::string daemon_image_name(const std::string& name);

// The image's `docker save` stream from the daemon, checked to have begun
// (status 200). Throws FileError naming `source`: no daemon, permission
// denied on its socket, no such image, the daemon's own refusal.
std::unique_ptr<Reader> open_daemon_image(const std::string& source);

}  // namespace memprofile
