#!/usr/bin/env bats
# scripts/cluster/switch-image.sh against the stub cluster.

setup() {
  load helpers
  setup_cluster
}

@test "switch-image: --help describes it" {
  run "${SCRIPTS}/switch-image.sh" --help
  assert_success
  assert_output --partial "usage: scripts/cluster/switch-image.sh -n NAMESPACE --deployment NAME --image IMAGE"
}

@test "switch-image: --dry-run prints the kubectl commands and changes nothing" {
  run "${SCRIPTS}/switch-image.sh" -n numaflow-system --deployment numaflow-controller \
    --image quay.io/numaproj/numaflow:main-1a2b3c4-memprofile --dry-run
  assert_success
  assert_line "kubectl set env deployment/numaflow-controller -n numaflow-system -c controller-manager NUMAFLOW_IMAGE=quay.io/numaproj/numaflow:main-1a2b3c4-memprofile "
  assert_line "kubectl rollout restart deployment/numaflow-controller -n numaflow-system "
  refute_output --partial "env updated"
  run calls
  refute_output --partial "kubectl set"
}

@test "switch-image: sets the variable, restarts and waits for the rollout" {
  run "${SCRIPTS}/switch-image.sh" -n numaflow-system --deployment numaflow-controller \
    --image quay.io/numaproj/numaflow:main-1a2b3c4-memprofile
  assert_success
  assert_output --partial "NUMAFLOW_IMAGE quay.io/numaproj/numaflow:v1.4.2 -> quay.io/numaproj/numaflow:main-1a2b3c4-memprofile"
  run calls
  assert_line "kubectl set env deployment/numaflow-controller -n numaflow-system -c controller-manager NUMAFLOW_IMAGE=quay.io/numaproj/numaflow:main-1a2b3c4-memprofile"
  assert_line "kubectl rollout restart deployment/numaflow-controller -n numaflow-system"
  assert_line "kubectl rollout status deployment/numaflow-controller -n numaflow-system --timeout=5m"
}

@test "switch-image: refuses an image that is not profilable" {
  run "${SCRIPTS}/switch-image.sh" -n numaflow-system --deployment numaflow-controller --image quay.io/numaproj/numaflow:v1.4.2
  assert_failure 3
  assert_output --partial "is not a profilable image: no io.memprofile.backend label"
  run calls
  refute_output --partial "kubectl set"
}

@test "switch-image: refuses a missing namespace, deployment or variable" {
  run "${SCRIPTS}/switch-image.sh" -n nope --deployment numaflow-controller --image x
  assert_failure 3
  assert_output "memprofile: namespace nope does not exist (or this kubeconfig cannot see it)"
  run "${SCRIPTS}/switch-image.sh" -n numaflow-system --deployment nope --image x
  assert_failure 3
  assert_output --partial "deployment nope does not exist in namespace numaflow-system"
  run "${SCRIPTS}/switch-image.sh" -n numaflow-system --deployment numaflow-controller --env NOPE_IMAGE \
    --image quay.io/numaproj/numaflow:main-1a2b3c4-memprofile
  assert_failure 3
  assert_output --partial "has no NOPE_IMAGE"
}

@test "switch-image: usage errors exit 2" {
  run "${SCRIPTS}/switch-image.sh" -n numaflow-system --image x
  assert_failure 2
  assert_output --partial "give the controller with --deployment"
  run "${SCRIPTS}/switch-image.sh" --bogus
  assert_failure 2
}
