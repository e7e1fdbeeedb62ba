#!/usr/bin/env bash
# scripts/docker-engine.sh, the docker tests' fixture: start is idempotent,
# the engine is trixie's Docker with buildx and the containerd image store,
# `docker run -v` reaches the test's directories, its network is its own,
# `docker exec` enters the container, and stop leaves no process and no
# mount behind, also when dockerd was killed with containers running; a
# start that gives up leaves nothing either.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/e2e/docker_lib.sh
source "$(dirname "$0")/docker_lib.sh"

state="${CACHE}/docker-engine"
# The engine's processes (its PID namespace), and mounts under the cache.
ns="$(cat "${state}/engine.pidns")"
in_engine() {
  { stat -L -c '%n %i' /proc/[0-9]*/ns/pid 2>/dev/null || true; } |
    awk -v i="${ns}" '$2 == i { split($1, p, "/"); print p[3] }'
}
mounted() { awk -v d="${state}/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts; }

# 1. Started by docker_lib.sh; a second start finds it running.
init="$(cat "${state}/engine.pid")"
"${ENGINE_SCRIPT}" start 2> "${SCRATCH}/start2.log" || fail "a second start failed: $(cat "${SCRATCH}/start2.log")"
grep -q "running (init ${init}," "${SCRATCH}/start2.log" || fail "a second start did not find the engine: $(cat "${SCRATCH}/start2.log")"
[[ "$(cat "${state}/engine.pid")" == "${init}" ]] || fail "a second start started another engine"
"${ENGINE_SCRIPT}" status || fail "status: the daemon does not answer"
[[ -z "$(mounted)" ]] || fail "the engine's mounts are on the machine's mount table: $(mounted | paste -sd' ')"
pass "start is idempotent; no mount on the machine's table"

server="$(docker version --format '{{.Server.Version}}')"
[[ "${server}" == 26.* ]] || fail "the daemon is ${server}, not trixie's 26"
[[ "$(command -v docker)" == "${state}/bin/docker" ]] || fail "docker is $(command -v docker), not the root's CLI"
grep -q '^github.com/docker/buildx 0\.1[3-9]' <<<"$(docker buildx version)" || fail "buildx: $(docker buildx version)"
grep -q io.containerd.snapshotter.v1 <<<"$(docker info --format '{{json .DriverStatus}}')" ||
  fail "not the containerd image store: $(docker info --format '{{json .DriverStatus}}')"
pass "docker ${server}, $(docker buildx version | cut -d' ' -f2), containerd image store"

# 2. A container: a volume under the test's scratch directory, its own network.
"${E2E_ROOT}/scripts/base-image.sh" docker amd64 "${SUITE}" "localhost/memprofile-base:${SUITE}-slim-amd64" >/dev/null
mkdir -p "${SCRATCH}/vol"
docker run --rm -v "${SCRATCH}/vol:/out" "localhost/memprofile-base:${SUITE}-slim-amd64" \
  sh -c 'echo written-in-a-container > /out/f; cat /proc/net/dev' > "${SCRATCH}/netdev"
[[ "$(cat "${SCRATCH}/vol/f" 2>/dev/null)" == written-in-a-container ]] || fail "docker run -v did not reach ${SCRATCH}/vol"
grep -q eth0 "${SCRATCH}/netdev" || fail "the container has no network of its own: $(cat "${SCRATCH}/netdev")"
if ip link show docker0 >/dev/null 2>&1; then fail "docker0 is on the machine's network"; fi
pass "docker run -v reaches the host's directory; the bridge stays in the engine's namespace"

# A container's processes and docker exec: inside the container, not the host.
ctr="$(docker run -d --stop-timeout 1 "localhost/memprofile-base:${SUITE}-slim-amd64" sleep 600)"
[[ "$(docker exec "${ctr}" cat /proc/1/cmdline | tr '\0' ' ')" == "sleep 600 " ]] ||
  fail "docker exec does not run in the container's namespaces"
if docker exec "${ctr}" test -e "${E2E_ROOT}/Makefile"; then fail "docker exec sees the machine's files"; fi
pass "docker exec runs in the container"

# 3. stop with a container running, then again: nothing left.
"${ENGINE_SCRIPT}" stop 2>/dev/null
[[ -z "$(in_engine)" ]] || fail "processes left after stop: $(in_engine | paste -sd' ')"
[[ -z "$(mounted)" ]] || fail "mounts left after stop: $(mounted | paste -sd' ')"
if "${ENGINE_SCRIPT}" status; then fail "status: answers after stop"; fi
"${ENGINE_SCRIPT}" stop || fail "a second stop failed"
pass "stop with a container running leaves no process and no mount; a second stop is fine"

# 4. dockerd killed hard with a container running: nothing outlives it.
"${ENGINE_SCRIPT}" start 2>/dev/null || fail "start after stop"
ns="$(cat "${state}/engine.pidns")"
sleeper="$(docker run -d "localhost/memprofile-base:${SUITE}-slim-amd64" sleep 600)"
[[ "$(in_engine | wc -l)" -ge 4 ]] || fail "expected tini, dockerd, containerd, a shim: $(in_engine | paste -sd' ')"
init="$(cat "${state}/engine.pid")"
dockerd="$(cut -d' ' -f1 < "/proc/${init}/task/${init}/children")"
[[ "$(cat "/proc/${dockerd}/comm")" == dockerd ]] || fail "the init's child is not dockerd"
kill -KILL "${dockerd}"
# A cap, not a measure: the namespace's processes go as soon as the kernel
# has reaped them, later on a busy machine.
for _ in $(seq 600); do [[ -n "$(in_engine)" ]] || break; sleep 0.1; done
[[ -z "$(in_engine)" ]] || fail "processes outlived a killed dockerd: $(in_engine | paste -sd' ')"
if "${ENGINE_SCRIPT}" status; then fail "status: answers with dockerd killed"; fi
"${ENGINE_SCRIPT}" stop 2> "${SCRATCH}/stop.log" || fail "stop after a killed dockerd: $(cat "${SCRATCH}/stop.log")"
[[ -z "$(mounted)" ]] || fail "mounts left after a killed dockerd: $(mounted | paste -sd' ')"
pass "dockerd killed with a container running: nothing outlives it, stop is fine"

# 5. A start that gives up (here: no time to answer) leaves nothing either.
if DOCKER_ENGINE_TIMEOUT=0 "${ENGINE_SCRIPT}" start 2> "${SCRATCH}/giveup.log"; then fail "a start with no time succeeded"; fi
grep -q "did not answer within 0 s" "${SCRATCH}/giveup.log" || fail "the failed start did not say why: $(cat "${SCRATCH}/giveup.log")"
[[ -z "$(mounted)" ]] || fail "mounts left after a failed start: $(mounted | paste -sd' ')"
if [[ -s "${state}/engine.pidns" ]]; then fail "a failed start left its pid files"; fi
pgrep -f "docker-engine.sh _daemon ${state}/" >/dev/null && fail "a failed start left its namespace's init"
pass "a start that gives up leaves no process and no mount"

# 6. And it starts again from there (stale sockets and pid files are gone).
"${ENGINE_SCRIPT}" start 2>/dev/null || fail "start after a killed dockerd"
docker rm --force "${sleeper}" "${ctr}" >/dev/null || fail "removing the containers"
pass "starts again after a killed dockerd"
