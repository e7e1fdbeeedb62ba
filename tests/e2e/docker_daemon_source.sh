#!/usr/bin/env bash
# preflight docker-daemon:NAME reads the image from a real Docker 26 daemon
# (scripts/docker-engine.sh) over its Engine API socket, nothing written to
# disk, and says what it says of the same image as a file: images built by
# buildx and loaded from the fixtures' archives, single- and multi-platform,
# by name, tag and image ID, from the containerd image store and from the
# classic one; the `docker save` files of each agree too (Docker >= 25 puts
# an OCI layout inside). Each failure is one line and exit 2: no daemon, a
# socket nobody listens on, permission denied, ssh://, an unknown image, and
# (from a daemon of the test's own on a unix socket) a refusal and a stream
# cut partway.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

IMAGES="${IMAGES:-${E2E_ROOT}/build-fixtures/images}"
[[ -e "${IMAGES}/multi.oci.tar" ]] || fail "no test images in ${IMAGES} (the fixtures.images test builds them)"

# load ARCHIVE: docker load it; prints what to ask the daemon for (its tag,
# or its image ID when the archive names none).
load() {
  local out
  out="$(docker load -i "$1" 2>&1)" || fail "docker load $1: ${out}"
  sed -n -e 's/^Loaded image: //p' -e 's/^Loaded image ID: //p' <<<"${out}" | tail -1
}

# agree NAME ARCHIVE: the daemon's image, its docker save file and ARCHIVE
# (where it came from) all get the same verdicts.
agree() {
  local name="$1" archive="$2" saved
  saved="${SCRATCH}/saved-$(tr -c 'a-zA-Z0-9' _ <<<"${name}").tar"
  docker save -o "${saved}" "${name}" || fail "docker save ${name}"
  same_verdicts "${archive}" "docker-daemon:${name}"
  same_verdicts "${saved}" "docker-daemon:${name}"
}

example_app amd64
example_app multi
docker save -o "${SCRATCH}/leaky-amd64.tar" localhost/leaky:amd64
docker save -o "${SCRATCH}/leaky-multi.tar" localhost/leaky:multi
agree localhost/leaky:amd64 "${SCRATCH}/leaky-amd64.tar"
agree localhost/leaky:multi "${SCRATCH}/leaky-multi.tar"
"${MEMPROFILE}" preflight --all-platforms docker-daemon:localhost/leaky:multi > "${SCRATCH}/multi" ||
  fail "leaky:multi is not READY on every platform: $(cat "${SCRATCH}/multi")"
[[ "$(grep -c '^READY: a preload profiler will attach to /usr/local/bin/leaky' "${SCRATCH}/multi")" == 2 ]] ||
  fail "leaky:multi: not READY for both platforms"
"${MEMPROFILE}" preflight --json --platform linux/arm64 docker-daemon:localhost/leaky:multi > "${SCRATCH}/arm64.json"
[[ "$(jq -r .platform "${SCRATCH}/arm64.json")" == linux/arm64 ]] || fail "--platform linux/arm64 of the daemon's image"
pass "buildx images (containerd store), single and multi-platform: the verdicts of their archives and docker save files"

declare -A loaded
for f in multi.oci.tar musl.docker.tar scratch-dispatcher.docker.tar ready.oci.tar wrong-arch.docker.tar; do
  loaded[${f}]="$(load "${IMAGES}/${f}")"
  agree "${loaded[${f}]}" "${IMAGES}/${f}"
done
docker tag "${loaded[ready.oci.tar]}" localhost/t-ready
drop_at_exit localhost/t-ready
same_verdicts "${IMAGES}/ready.oci.tar" docker-daemon:localhost/t-ready
pass "fixture images loaded by docker (by tag, by image ID, a bare name meaning :latest, a multi-arch index): the same verdicts"

# Peak memory and what is left behind: a streamed read. The run gets a
# private, empty TMPDIR and working directory, so that what other tests
# running in parallel write to /tmp cannot be mistaken for its leftovers.
quiet="${SCRATCH}/quiet" && mkdir "${quiet}"
(cd "${quiet}" && TMPDIR="${quiet}" /usr/bin/time -f %M -o "${SCRATCH}/rss" \
  "${MEMPROFILE}" preflight --all-platforms docker-daemon:localhost/leaky:multi > /dev/null) ||
  fail "leaky:multi for the RSS"
[[ -z "$(ls -A "${quiet}")" ]] || fail "preflight left files behind: $(ls -A "${quiet}")"
if sanitized "${MEMPROFILE}"; then
  pass "peak RSS not bounded under AddressSanitizer ($(($(cat "${SCRATCH}/rss") / 1024)) MiB)"
else
  (($(cat "${SCRATCH}/rss") < 64 * 1024)) || fail "peak RSS $(cat "${SCRATCH}/rss") KiB for two platforms"
  pass "peak RSS $(($(cat "${SCRATCH}/rss") / 1024)) MiB for two platforms of 170 MB each, nothing written"
fi

# Failures: one line, exit 2.
expect_error "no image nosuch:latest in the Docker daemon at unix://.*\(docker images lists what it has\)" docker-daemon:nosuch
expect_error "no image localhost/leaky:latest" docker-daemon:localhost/leaky
expect_error "names no image" docker-daemon:
DOCKER_HOST="unix://${SCRATCH}/none.sock" expect_error "no Docker daemon at unix://.*none.sock \(from DOCKER_HOST\): the socket does not exist" \
  docker-daemon:localhost/leaky:amd64
/usr/bin/python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "${SCRATCH}/dead.sock"
DOCKER_HOST="unix://${SCRATCH}/dead.sock" expect_error "no Docker daemon listens on unix://.*dead.sock" docker-daemon:x
DOCKER_HOST=ssh://user@host expect_error "ssh:// is not read directly; forward the socket" docker-daemon:x
DOCKER_HOST=npipe:////./pipe/docker_engine expect_error "not a daemon address memprofile reads" docker-daemon:x
# The engine's socket, as a user who is not in its group.
cp "${MEMPROFILE}" "${SCRATCH}/memprofile"
chmod 755 "${SCRATCH}" "${SCRATCH}/memprofile"
rc=0
setpriv --reuid=nobody --regid=nogroup --clear-groups "${SCRATCH}/memprofile" preflight docker-daemon:localhost/leaky:amd64 \
  > /dev/null 2> "${SCRATCH}/err" || rc=$?
[[ "${rc}" == 2 && "$(wc -l < "${SCRATCH}/err")" == 1 ]] || fail "as nobody: exit ${rc}: $(cat "${SCRATCH}/err")"
grep -q "permission denied on the Docker daemon's socket" "${SCRATCH}/err" || fail "as nobody: $(cat "${SCRATCH}/err")"
echo "   $(cat "${SCRATCH}/err")"
# docker contexts, as the CLI resolves them when DOCKER_HOST is unset.
ctx_config="${SCRATCH}/docker-config"
hash="$(printf %s mp-test | sha256sum | cut -d' ' -f1)"
mkdir -p "${ctx_config}/contexts/meta/${hash}"
printf '{"Name":"mp-test","Endpoints":{"docker":{"Host":"%s","SkipTLSVerify":false}}}\n' "${DOCKER_HOST}" \
  > "${ctx_config}/contexts/meta/${hash}/meta.json"
echo '{"currentContext":"mp-test"}' > "${ctx_config}/config.json"
(unset DOCKER_HOST; DOCKER_CONFIG="${ctx_config}" "${MEMPROFILE}" preflight docker-daemon:localhost/leaky:amd64 > /dev/null) ||
  fail "the daemon named by the current docker context"
(unset DOCKER_HOST; DOCKER_CONFIG="${ctx_config}" DOCKER_CONTEXT=gone expect_error "docker context gone: .* is missing" docker-daemon:x)
pass "docker contexts: the current one is used when DOCKER_HOST is unset; a missing one is named"

# A daemon of the test's own on a unix socket: a refusal with the daemon's
# message, and an export cut partway through.
cat > "${SCRATCH}/fake.py" <<'PY'
import os, socket, sys
path, mode, saved = sys.argv[1], sys.argv[2], sys.argv[3]
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(4)
srv.settimeout(120)
while True:
    conn, _ = srv.accept()
    if not conn.recv(65536):  # memprofile's connect-only probe
        conn.close()
        continue
    if mode == "refuse":
        body = b'{"message":"export refused: content digest sha256:abc not found"}\n'
        conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
    else:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\nTransfer-Encoding: chunked\r\n\r\n")
        with open(saved, "rb") as f:
            data = f.read(os.path.getsize(saved) // 2)
        for i in range(0, len(data), 1 << 16):
            chunk = data[i:i + (1 << 16)]
            try:
                conn.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            except OSError:
                break
    conn.close()
PY
for mode in refuse cut; do
  timeout 300 /usr/bin/python3 "${SCRATCH}/fake.py" "${SCRATCH}/${mode}.sock" "${mode}" "${SCRATCH}/leaky-amd64.tar" &
  at_exit "kill $! 2>/dev/null"
done
for _ in $(seq 300); do [[ -S "${SCRATCH}/refuse.sock" && -S "${SCRATCH}/cut.sock" ]] && break; sleep 0.1; done
DOCKER_HOST="unix://${SCRATCH}/refuse.sock" expect_error \
  "the Docker daemon at unix://.*refused to export x:latest \(HTTP 500\): export refused: content digest sha256:abc not found" docker-daemon:x
DOCKER_HOST="unix://${SCRATCH}/cut.sock" expect_error "docker-daemon:x: .*(broke off|truncated|end)" docker-daemon:x
pass "each failure is one line and exit 2"

# The classic (graph-driver) image store: the same image, the same verdicts.
docker rmi --force localhost/t-ready "${loaded[@]}" > /dev/null 2>&1 || true
"${ENGINE_SCRIPT}" stop 2>/dev/null
DOCKER_ENGINE_STORE=classic "${ENGINE_SCRIPT}" start 2> "${SCRATCH}/engine.log" ||
  { cat "${SCRATCH}/engine.log" >&2; fail "the engine did not start with the classic store"; }
at_exit "docker rmi --force localhost/leaky:amd64 localhost/mpt-musl:latest >/dev/null 2>&1"
[[ "$(docker info --format '{{.Driver}}')" != overlayfs ]] || fail "still the containerd store"
docker load -i "${SCRATCH}/leaky-amd64.tar" > /dev/null
docker load -i "${IMAGES}/musl.docker.tar" > /dev/null
agree localhost/leaky:amd64 "${SCRATCH}/leaky-amd64.tar"
agree localhost/mpt-musl:latest "${IMAGES}/musl.docker.tar"
pass "the classic image store ($(docker info --format '{{.Driver}}')): the same verdicts"
