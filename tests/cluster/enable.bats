#!/usr/bin/env bats
# scripts/cluster/enable.sh against the stub cluster; every object it writes
# is schema-checked (tests/cluster/validate.mjs).

setup() {
  load helpers
  setup_cluster
}

replaced() { jq "$@" "${STUB_DIR}/replaced.json"; }
valid() { node "${BATS_TEST_DIRNAME}/validate.mjs" "${STUB_DIR}/replaced.json"; }

@test "enable: a Deployment's command runs through memprofile exec, with its own size-limited volume" {
  run "${SCRIPTS}/enable.sh" -n team --deployment leaky --size-limit 1Gi
  assert_success
  assert_output --partial "removing LD_PRELOAD from the pod env"
  run replaced -c '.spec.template.spec.containers[0].command'
  assert_output '["/usr/bin/memprofile","exec","--","/usr/local/bin/leaky"]'
  run replaced -c '.spec.template.spec.containers[0].args'
  assert_output '["0"]'
  run replaced -c '.spec.template.spec.volumes'
  assert_output '[{"name":"data","persistentVolumeClaim":{"claimName":"leaky-data"}},{"name":"memprofile-output","emptyDir":{"sizeLimit":"1Gi"}}]'
  run replaced -c '.spec.template.spec.containers[0].volumeMounts'
  assert_output '[{"name":"data","mountPath":"/data"},{"name":"memprofile-output","mountPath":"/var/memprofile"}]'
  run replaced -r '[.. | objects | select(.name? == "LD_PRELOAD")] | length'
  assert_output 0
  run replaced -c '.spec.template.spec.containers[0].env'
  assert_output '[{"name":"RUST_LOG","value":"info"},{"name":"MEMPROFILE_OUTPUT_DIR","value":"/var/memprofile"}]'
  run replaced -r '.metadata.resourceVersion'
  assert_output 48213
  run valid
  assert_success
  run calls
  assert_line "kubectl replace -f -"
  assert_line "kubectl rollout status deployment/leaky -n team --timeout=5m"
}

@test "enable: running it twice changes nothing more" {
  run "${SCRIPTS}/enable.sh" -n team --deployment leaky
  assert_success
  cp "${STUB_DIR}/replaced.json" "${STUB_DIR}/cluster/team/deployment/leaky.json"
  run "${SCRIPTS}/enable.sh" -n team --deployment leaky
  assert_success
  run diff <(jq -S . "${STUB_DIR}/cluster/team/deployment/leaky.json") <(jq -S . "${STUB_DIR}/replaced.json")
  assert_success
}

@test "enable: --dry-run prints the object and the commands, replaces nothing" {
  run "${SCRIPTS}/enable.sh" -n team --deployment leaky --backend heaptrack --image registry.example.com/team/leaky:v1-memprofile --dry-run
  assert_success
  assert_output --partial '"name": "MEMPROFILE_BACKEND"'
  assert_line "kubectl replace -f - "
  assert_line "kubectl rollout status deployment/leaky -n team --timeout=5m "
  [[ ! -e "${STUB_DIR}/replaced.json" ]]
}

@test "enable: a StatefulSet's named container; several containers need -c" {
  run "${SCRIPTS}/enable.sh" -n team --statefulset db
  assert_failure 3
  assert_output --partial "statefulset db has several containers: name one with -c"
  run "${SCRIPTS}/enable.sh" -n team --statefulset db -c db --target /usr/lib/postgresql/15/bin/postgres
  assert_success
  run replaced -c '.spec.template.spec.containers[0].env'
  assert_output '[{"name":"MEMPROFILE_OUTPUT_DIR","value":"/var/memprofile"},{"name":"MEMPROFILE_TARGET","value":"/usr/lib/postgresql/15/bin/postgres"}]'
  run replaced -c '.spec.template.spec.containers[1]'
  assert_output '{"name":"exporter","image":"registry.example.com/team/db-exporter:v1"}'
  run replaced -r '.spec.template.spec.containers[0].command // "image entrypoint"'
  assert_output "image entrypoint"
  run valid
  assert_success
}

@test "enable: a numaflow Pipeline vertex's udf container and the vertex volume" {
  run "${SCRIPTS}/enable.sh" -n team --pipeline simple --vertex cat
  assert_success
  run replaced -c '.spec.vertices[] | select(.name == "cat") | .volumes'
  assert_output '[{"name":"memprofile-output","emptyDir":{"sizeLimit":"2Gi"}}]'
  run replaced -c '.spec.vertices[] | select(.name == "cat") | .udf.container.volumeMounts'
  assert_output '[{"name":"memprofile-output","mountPath":"/var/memprofile"}]'
  run replaced -c '.spec.vertices[] | select(.name == "in")'
  assert_output '{"name":"in","source":{"generator":{"rpu":5,"duration":"1s"}}}'
  run valid
  assert_success
}

@test "enable: the numa container of a vertex through containerTemplate env, LD_PRELOAD removed" {
  run "${SCRIPTS}/enable.sh" -n team --pipeline simple --vertex accum -c numa --no-image-check
  assert_success
  assert_output --partial "containerTemplate has no volumeMounts"
  run replaced -c '.spec.vertices[] | select(.name == "accum") | .containerTemplate.env'
  assert_output '[{"name":"MEMORY_PROFILER_TRACK_CHILD_PROCESSES","value":"1"},{"name":"MEMPROFILE_OUTPUT_DIR","value":"/var/memprofile"}]'
  run valid
  assert_success
}

@test "enable: refuses an image that is not profilable, a missing vertex, container or namespace" {
  run "${SCRIPTS}/enable.sh" -n team --pipeline simple --vertex accum
  assert_failure 3
  assert_output --partial "registry.example.com/team/udf-accum:v2 is not a profilable image"
  run "${SCRIPTS}/enable.sh" -n team --pipeline simple --vertex nope
  assert_failure 3
  assert_output --partial "pipeline simple has no vertex nope"
  run "${SCRIPTS}/enable.sh" -n team --deployment leaky -c sidecar
  assert_failure 3
  assert_output --partial "deployment leaky has no container sidecar"
  run "${SCRIPTS}/enable.sh" -n prod --deployment leaky
  assert_failure 3
  [[ ! -e "${STUB_DIR}/replaced.json" ]]
}

@test "enable: usage errors exit 2" {
  run "${SCRIPTS}/enable.sh" -n team
  assert_failure 2
  run "${SCRIPTS}/enable.sh" -n team --pipeline simple
  assert_failure 2
  assert_output --partial "--pipeline needs --vertex"
  run "${SCRIPTS}/enable.sh" -n team --deployment leaky --size-limit lots
  assert_failure 2
  run "${SCRIPTS}/enable.sh" -n team --deployment leaky --backend valgrind
  assert_failure 2
  # The backends are the preload recipes'.
  assert_output --partial "--backend must be bytehound, heaptrack or jemalloc"
}

@test "enable --serve: the launcher serves on a named port with a Secret's token; the scrapers' annotations" {
  run "${SCRIPTS}/enable.sh" -n team --deployment leaky --serve 6060
  assert_failure 2
  assert_output --partial "--serve needs --serve-token-secret"
  run "${SCRIPTS}/enable.sh" -n team --deployment leaky --serve 70000 --serve-token-secret t
  assert_failure 2
  run "${SCRIPTS}/enable.sh" -n team --deployment leaky --serve 6060 --serve-token-secret memprofile-serve
  assert_success
  run replaced -c '.spec.template.spec.containers[0].env | map(select(.name | startswith("MEMPROFILE_SERVE")))'
  assert_output '[{"name":"MEMPROFILE_SERVE","value":"0.0.0.0:6060"},{"name":"MEMPROFILE_SERVE_TOKEN_FILE","value":"/var/run/memprofile-serve/token"}]'
  run replaced -c '.spec.template.spec.containers[0].ports'
  assert_output '[{"name":"memprofile","containerPort":6060,"protocol":"TCP"}]'
  run replaced -c '.spec.template.spec.volumes | map(select(.name == "memprofile-serve-token"))'
  assert_output '[{"name":"memprofile-serve-token","secret":{"secretName":"memprofile-serve","defaultMode":292}}]'
  run replaced -c '.spec.template.spec.containers[0].volumeMounts | map(select(.name == "memprofile-serve-token"))'
  assert_output '[{"name":"memprofile-serve-token","mountPath":"/var/run/memprofile-serve","readOnly":true}]'
  run replaced -c '.spec.template.metadata.annotations | with_entries(select(.key | test("grafana|prometheus")))'
  assert_output '{"profiles.grafana.com/memory.scrape":"true","profiles.grafana.com/memory.port_name":"memprofile","profiles.grafana.com/memory.path":"/debug/pprof/heap","prometheus.io/scrape":"true","prometheus.io/port":"6060","prometheus.io/path":"/metrics"}'
  run valid
  assert_success
}
