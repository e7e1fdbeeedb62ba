# Shared by the cluster helpers' bats tests: a scratch dir per test with a
# stub cluster (tests/cluster/fixtures) behind the stub kubectl and skopeo.
# shellcheck shell=bash
# shellcheck disable=SC2034 # ROOT, SCRIPTS, FIXTURES are for the .bats files
ROOT="$(cd "${BATS_TEST_DIRNAME}/../.." && pwd)"
NODE_MODULES="${ROOT}/devtools/node/node_modules"
load "${NODE_MODULES}/bats-support/load.bash"
load "${NODE_MODULES}/bats-assert/load.bash"
SCRIPTS="${ROOT}/scripts/cluster"
FIXTURES="${BATS_TEST_DIRNAME}/fixtures"

setup_cluster() {
  export STUB_DIR="${BATS_TEST_TMPDIR}/stub"
  local c="${STUB_DIR}/cluster"
  mkdir -p "${c}/team/deployment" "${c}/team/statefulset" "${c}/team/pipeline" "${c}/team/pod" \
    "${c}/numaflow-system/deployment" "${STUB_DIR}/images"
  printf '%s\n' team numaflow-system default > "${c}/namespaces"
  cp "${FIXTURES}/deployment-leaky.json" "${c}/team/deployment/leaky.json"
  cp "${FIXTURES}/statefulset-db.json" "${c}/team/statefulset/db.json"
  cp "${FIXTURES}/pipeline-simple.json" "${c}/team/pipeline/simple.json"
  cp "${FIXTURES}/pod-leaky.json" "${c}/team/pod/leaky-6b8d9c7f5-x2x9z.json"
  touch "${c}/team/pod/leaky-6b8d9c7f5-x2x9z.memprofile"
  cp "${FIXTURES}/pod-plain.json" "${c}/team/pod/plain-5f7c9d8b6-q4w7e.json"
  cp "${FIXTURES}/pod-db.json" "${c}/team/pod/db-0.json"
  touch "${c}/team/pod/db-0.memprofile"
  cp "${FIXTURES}/deployment-numaflow-controller.json" "${c}/numaflow-system/deployment/numaflow-controller.json"
  image_labels registry.example.com/team/leaky:v1-memprofile '{"io.memprofile.backend": "jemalloc"}'
  image_labels registry.example.com/team/db:v7-memprofile '{"io.memprofile.backend": "heaptrack"}'
  image_labels registry.example.com/team/udf-cat:v2-memprofile '{"io.memprofile.backend": "bytehound"}'
  image_labels registry.example.com/team/udf-accum:v2 '{"org.opencontainers.image.version": "v2"}'
  image_labels registry.example.com/team/leaky:v1 '{"org.opencontainers.image.source": "https://example.com/leaky"}'
  image_labels quay.io/numaproj/numaflow:main-1a2b3c4-memprofile '{"io.memprofile.backend": "bytehound"}'
  image_labels quay.io/numaproj/numaflow:v1.4.2 '{}'
  export PATH="${ROOT}/tests/cluster/stub:${PATH}"
  export STUB_MEMPROFILE="${MEMPROFILE_STATIC:-${ROOT}/build/tool/memprofile-static}"
}

image_labels() {  # IMAGE LABELS_JSON: what skopeo inspect says of IMAGE
  jq -n --arg name "$1" --argjson labels "$2" \
    '{Name: ($name | sub(":[^:/]*$"; "")), Digest: "sha256:2f1e", Architecture: "amd64", Os: "linux", Labels: $labels}' \
    > "${STUB_DIR}/images/$(tr '/:' '__' <<<"$1").json"
}

# calls: what kubectl and skopeo were asked, one call a line, arguments space-separated.
calls() { tr '\t' ' ' < "${STUB_DIR}/calls" 2>/dev/null || true; }
