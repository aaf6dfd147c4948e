#!/usr/bin/env bash
# Runs every test tier: format, lints, CRD drift, unit + component tests, the integration
# suites against the real Keystone/Neutron lab and a real kube-apiserver, the chart test,
# and the benchmarks. Labs are started if not running and left running (fast reruns);
# stop them with lab/openstack/down.sh and lab/kube/down.sh.
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/bnerd-vpn-operator/target}
export CARGO_TERM_COLOR=never
step() { printf '\n== %s (%ss)\n' "$*" "$SECONDS"; }

step "toolchain components"
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "layering: the CLI and its tests without the operator"
# A workspace build unifies bnerd-testkit's features, so only a build of the CLI alone shows
# whether its tests still compile without the testkit's `engine`.
if cargo tree -p bnerd-clusterlink-cli | grep -q ' bnerd-vpn-operator '; then
  echo "bnerd-clusterlink-cli depends on bnerd-vpn-operator (cargo tree -p bnerd-clusterlink-cli -i bnerd-vpn-operator)"; exit 1
fi
if cargo tree -p bnerd-vpn-operator -e normal | grep -q ' bnerd-testkit '; then
  echo "bnerd-testkit is a normal dependency of the operator; it must stay a dev-dependency"; exit 1
fi
cargo clippy -q -p bnerd-clusterlink-cli --all-targets -- -D warnings

step "CRD drift"
# The chart's CRD template (templates/crd-clusterlinks.yaml) renders this file unchanged, plus
# the release's labels (lab/kube/chart-test.sh checks that); the file must be crdgen's output.
cargo run -q -p bnerd-api --bin crdgen | diff -u charts/bnerd-vpn-operator/files/clusterlinks.ipsec.bnerd.net.yaml - \
  || { echo "CRD drift: run 'cargo run -p bnerd-api --bin crdgen > charts/bnerd-vpn-operator/files/clusterlinks.ipsec.bnerd.net.yaml'"; exit 1; }

step "container image (static musl binaries, podman build, size, root filesystem export)"
# The last line is the image's exported root filesystem; tests/image.rs runs its operator.
IMAGE_ROOTFS=$(bash image/build.sh | tail -n 1)
export BNERD_IMAGE_ROOTFS=$IMAGE_ROOTFS BNERD_REQUIRE_IMAGE=1

step "OpenStack lab (Keystone + Neutron)"
LAB_ENV=$(bash lab/openstack/up.sh)
export BNERD_LAB_ENV=$LAB_ENV BNERD_REQUIRE_LAB=1
# What the lab holds before the tests; compared at the end: tests remove what they made.
LAB_PY=$(cat "$(dirname "$LAB_ENV")/venv.path")/bin/python
CENSUS=$(mktemp)
"$LAB_PY" lab/openstack/census.py snapshot "$CENSUS"

step "Kubernetes lab (kube-apiserver + etcd)"
# The e2e, leader-election, metrics and chart tiers need it: no apiserver is a failed run.
KUBECONFIG_PATH=$(bash lab/kube/up.sh | tail -n 1) \
  || { echo "kube-apiserver lab could not be built or started (see above): failing"; exit 1; }
export BNERD_KUBECONFIG=$KUBECONFIG_PATH BNERD_REQUIRE_KUBE=1

step "cargo test (unit, component, integration against the labs, e2e)"
TEST_LOG=$(mktemp)
cargo test --workspace 2>&1 | tee "$TEST_LOG"
passed=$(grep -E '^test result:' "$TEST_LOG" | sed -E 's/.* ([0-9]+) passed.*/\1/' | paste -sd+ | bc)
failed=$(grep -E '^test result:' "$TEST_LOG" | sed -E 's/.* ([0-9]+) failed.*/\1/' | paste -sd+ | bc)
skipped=$(grep -c '^SKIPPED' "$TEST_LOG" || true)
rm -f "$TEST_LOG"

step "Helm chart against the apiserver"
CHART_LOG=$(mktemp)
bash lab/kube/chart-test.sh 2>&1 | tee "$CHART_LOG"
chart=$(sed -nE 's/^chart-test: ([0-9]+) passed.*/\1/p' "$CHART_LOG" | tail -n 1)
passed=$((passed + ${chart:-0}))
rm -f "$CHART_LOG"

step "benchmark: OpenStack calls per converge / resync"
cargo bench -q -p bnerd-vpn-operator --bench calls 2>/dev/null | grep -v '^$'
step "benchmark: estate scale (1000 links, 1000 gateways, fake cloud; docs/performance.md)"
cargo bench -q -p bnerd-vpn-operator --bench estate 2>/dev/null | grep -v '^$'
step "benchmark: against the manual method (raw Neutron floor, openstack CLI, the operator; 1 and 20 links on the labs; docs/performance.md)"
# stderr kept: its round lines show progress, and a failed run (an object missing, a lab
# that did not answer) says why before pipefail fails the run.
cargo bench -q -p bnerd-vpn-operator --bench manual 2>&1 | grep -v '^$'
step "lab hygiene: the OpenStack lab holds what it held before the tests"
"$LAB_PY" lab/openstack/census.py compare "$CENSUS"
rm -f "$CENSUS"
step "done"
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
