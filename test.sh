#!/usr/bin/env bash
# Runs every test tier: format, lints, CRD drift, the image, unit + component tests, the
# integration suites against the real Keystone/Neutron lab and a real kube-apiserver, the
# chart test, and the benchmarks. Labs are started if not running (while the crates build)
# and left running (fast reruns); stop them with lab/openstack/down.sh and lab/kube/down.sh.
#
# The last line is always the totals ("N passed, N failed, N skipped"), whatever stops the
# run; a failed run names its failed tiers just above. Every step runs under a time limit:
# a hang fails that step in minutes and names it (TIMEOUT).
#
# Env: TEST_LANES (default 3) test binaries run side by side; TEST_BINARY_LIMIT (default
# 1500) seconds one test binary may take.
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/bnerd-vpn-operator/target}
export CARGO_TERM_COLOR=never

passed=0; failed=0; skipped=0; tier="setup"; failed_tiers=()
totals() {
  local rc=$?
  # Something failed that no test result counted (a build error, a crashed test binary, a
  # failed step): the run is a failure all the same, and the tier it stopped in is named.
  if [ "$rc" != 0 ]; then
    failed_tiers+=("$tier")
    [ "$failed" -gt 0 ] || failed=1
  fi
  # Lab starts still running in the background when a step failed.
  jobs -p | xargs -r kill 2>/dev/null || true
  [ "${#failed_tiers[@]}" = 0 ] || printf 'failed tiers: %s\n' "$(IFS=';'; echo "${failed_tiers[*]}")"
  echo "${passed} passed, ${failed} failed, ${skipped} skipped"
  [ "$failed" = 0 ] || exit 1
}
trap totals EXIT
step() { tier=$*; printf '\n== %s (%ss)\n' "$*" "$SECONDS"; }
# A tier that failed without stopping the run (its failures are counted).
tier_failed() { failed_tiers+=("$1"); }
# Run a command under a time limit of $1 seconds; a hang is named.
limit() {
  local secs=$1 rc=0; shift
  timeout --kill-after=30 "$secs" "$@" || rc=$?
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || echo "TIMEOUT: '$tier' did not finish within ${secs}s"
  return "$rc"
}

step "toolchain components"
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || limit 600 rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || limit 600 rustup component add clippy

# The labs start while the crates build: they wait on pip, MariaDB and Go, the build on the
# CPUs. Their output goes to a log printed when the tests need them.
LAB_LOG=$(mktemp); KUBE_LOG=$(mktemp)
# A cold start builds kube-apiserver from Go modules and installs Keystone and Neutron.
(timeout --kill-after=30 1800 bash lab/openstack/up.sh >"$LAB_LOG.out" 2>"$LAB_LOG") & lab_pid=$!
(timeout --kill-after=30 1800 bash lab/kube/up.sh >"$KUBE_LOG.out" 2>"$KUBE_LOG") & kube_pid=$!
# A second apiserver (its own etcd, state dir and ports) for a second lane of the tests that
# write ClusterLinks: each apiserver admits one such test at a time (the lock beside its
# kubeconfig), and one lane of them is the longest path of the run.
KUBE2=(KLAB="$HOME/.cache/bnerd-vpn-operator/kubelab-run2" KLAB_PORT=16444 KLAB_ETCD_PORT=22381 KLAB_KCM_PORT=16258)
KUBE2_LOG=$(mktemp)
(env "${KUBE2[@]}" timeout --kill-after=30 1800 bash lab/kube/up.sh >"$KUBE2_LOG.out" 2>"$KUBE2_LOG") & kube2_pid=$!
# helm renders the chart for e2e and the chart tier: built here beside the labs, so that on a
# cold Go cache no test builds it while it holds an apiserver (an e2e test once spent 800 s so).
# `all` builds it after kube-apiserver and the controller-manager (waiting on up.sh's build
# lock): helm is a tool of the same Go module, and built after them it finds most of its
# packages compiled (26 s instead of building them a second time beside them).
HELM_LOG=$(mktemp)
(timeout --kill-after=30 1800 bash lab/kube/build.sh all >"$HELM_LOG.out" 2>"$HELM_LOG") & helm_pid=$!

step "cargo fmt --check"
limit 300 cargo fmt --all -- --check

step "cargo clippy -D warnings"
limit 3600 cargo clippy --workspace --all-targets -- -D warnings

step "layering: the CLI and its tests without the operator, the harness without the operator"
if cargo tree -p bnerd-clusterlink-cli | grep -q ' bnerd-vpn-operator '; then
  echo "bnerd-clusterlink-cli depends on bnerd-vpn-operator (cargo tree -p bnerd-clusterlink-cli -i bnerd-vpn-operator)"; exit 1
fi
if cargo tree -p bnerd-testkit | grep -q ' bnerd-vpn-operator '; then
  echo "bnerd-testkit depends on bnerd-vpn-operator; the harness reaches the engine directly (cargo tree -p bnerd-testkit -i bnerd-vpn-operator)"; exit 1
fi
if cargo tree -p bnerd-vpn-operator -e normal | grep -q ' bnerd-testkit '; then
  echo "bnerd-testkit is a normal dependency of the operator; it must stay a dev-dependency"; exit 1
fi

step "CRD drift"
# The chart's CRD template (templates/crd-clusterlinks.yaml) renders this file unchanged, plus
# the release's labels (lab/kube/chart-test.sh checks that); the file must be crdgen's output.
limit 900 cargo run -q -p bnerd-api --bin crdgen | diff -u charts/bnerd-vpn-operator/files/clusterlinks.ipsec.bnerd.net.yaml - \
  || { echo "CRD drift: run 'cargo run -p bnerd-api --bin crdgen > charts/bnerd-vpn-operator/files/clusterlinks.ipsec.bnerd.net.yaml'"; exit 1; }

step "test binaries (built once; run below, side by side)"
ARTIFACTS=$(mktemp)
limit 3600 cargo test --workspace --no-run --message-format=json-render-diagnostics >"$ARTIFACTS"

step "layering: no module cycle in any crate"
# The check is a test binary of its own (it also runs with the others below); here it fails
# the run early, under its own name.
cycles_exe=$(sed -nE 's/.*"executable":"([^"]*\/module_cycles-[^"]+)".*/\1/p' "$ARTIFACTS" | head -n 1)
[ -n "$cycles_exe" ] || { echo "the module_cycles test binary was not built"; exit 1; }
limit 120 "$cycles_exe" -q

step "container image (static musl binaries, podman build, size, root filesystem export)"
# The last line is the image's exported root filesystem; tests/image.rs runs its operator.
IMAGE_ROOTFS=$(limit 3600 bash image/build.sh | tail -n 1)
export BNERD_IMAGE_ROOTFS=$IMAGE_ROOTFS BNERD_REQUIRE_IMAGE=1

step "OpenStack lab (Keystone + Neutron)"
lab_rc=0; wait "$lab_pid" || lab_rc=$?
cat "$LAB_LOG"
[ "$lab_rc" != 124 ] || echo "TIMEOUT: lab/openstack/up.sh did not finish within 1800s"
[ "$lab_rc" = 0 ] || { echo "lab/openstack/up.sh failed ($lab_rc): failing"; exit 1; }
LAB_ENV=$(tail -n 1 "$LAB_LOG.out")
export BNERD_LAB_ENV=$LAB_ENV BNERD_REQUIRE_LAB=1
# What the lab holds before the tests; compared at the end: tests remove what they made.
LAB_PY=$(cat "$(dirname "$LAB_ENV")/venv.path")/bin/python
CENSUS=$(mktemp)
limit 300 "$LAB_PY" lab/openstack/census.py snapshot "$CENSUS"

step "Kubernetes labs (kube-apiserver + etcd + kube-controller-manager; a second one for a second lane)"
# The e2e, leader-election, metrics and chart tiers need it: no apiserver is a failed run.
kube_rc=0; wait "$kube_pid" || kube_rc=$?
cat "$KUBE_LOG" "$KUBE_LOG.out"
[ "$kube_rc" != 124 ] || echo "TIMEOUT: lab/kube/up.sh did not finish within 1800s"
[ "$kube_rc" = 0 ] || { echo "kube-apiserver lab could not be built or started (see above): failing"; exit 1; }
KUBECONFIG_PATH=$(tail -n 1 "$KUBE_LOG.out")
export BNERD_KUBECONFIG=$KUBECONFIG_PATH BNERD_REQUIRE_KUBE=1
kube2_rc=0; wait "$kube2_pid" || kube2_rc=$?
[ "$kube2_rc" = 0 ] || { cat "$KUBE2_LOG"; echo "the second kube-apiserver lab did not start ($kube2_rc): failing"; exit 1; }
export KUBECONFIG_2=$(tail -n 1 "$KUBE2_LOG.out")
helm_rc=0; wait "$helm_pid" || helm_rc=$?
[ "$helm_rc" = 0 ] || { cat "$HELM_LOG"; echo "helm could not be built ($helm_rc): failing"; exit 1; }
rm -f "$HELM_LOG" "$HELM_LOG.out"
rm -f "$LAB_LOG" "$LAB_LOG.out" "$KUBE_LOG" "$KUBE_LOG.out" "$KUBE2_LOG" "$KUBE2_LOG.out"

step "cargo test (unit, component, integration against the labs, e2e), ${TEST_LANES:-3} lanes"
# The lab crash-point sample: a fresh seed each run (runs cover every point over time), or
# the one given, to repeat a run's sample.
export BNERD_CRASH_SEED=${BNERD_CRASH_SEED:-$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')}
echo "lab crash-point sample: BNERD_CRASH_SEED=$BNERD_CRASH_SEED"
TEST_LOG=$(mktemp); LANE_DIR=$(mktemp -d)
# Every test binary cargo built: "<name> <package dir> <executable>", the slowest first so
# the lanes end together (the queue hands the next binary to the first free lane). The ones
# that write ClusterLinks (e2e, estate_binary, packets, cli, operations, image, tls,
# operator_credential) take turns on their apiserver's lock (bnerd_testkit::operator_proc),
# so they are spread over the two apiservers and through the queue.
slow_first='packets cross_tenant e2e findings estate_binary cli estate scenarios per_customer crash_points parity plan lost_writes operations image'
sed -nE 's/.*"manifest_path":"([^"]+)\/Cargo.toml".*"target":\{[^}]*"name":"([^"]+)".*"profile":\{[^}]*"test":true[^}]*\}.*"executable":"([^"]+)".*/\2 \1 \3/p' "$ARTIFACTS" \
  | sort -u >"$LANE_DIR/all"
{ for s in $slow_first; do grep -E "^$s " "$LANE_DIR/all" || true; done
  for s in $slow_first; do echo "^$s "; done >"$LANE_DIR/slow"
  grep -v -f "$LANE_DIR/slow" "$LANE_DIR/all" || true; } >"$LANE_DIR/queue"
[ -s "$LANE_DIR/queue" ] || { echo "no test binary found in cargo's output"; exit 1; }
echo "$(wc -l <"$LANE_DIR/queue") test binaries"
export LANE_DIR
# These write ClusterLinks on the second apiserver; the other such tests on the first.
export SECOND_APISERVER=' packets cli '
run_binary() {
  local name=$1 dir=$2 exe=$3 log="$LANE_DIR/$1.$(basename "$3").log" start=$SECONDS rc=0
  local kube=$BNERD_KUBECONFIG
  [[ $SECOND_APISERVER != *" $name "* ]] || kube=$KUBECONFIG_2
  (cd "$dir" && BNERD_KUBECONFIG=$kube timeout --kill-after=30 "${TEST_BINARY_LIMIT:-1500}" "$exe") >"$log" 2>&1 || rc=$?
  {
    flock 9
    printf '\n== test binary %s (%s): %ss, exit %s\n' "$name" "$dir" "$((SECONDS - start))" "$rc"
    cat "$log"
    [ "$rc" != 124 ] && [ "$rc" != 137 ] || echo "TIMEOUT: test binary $name did not finish within ${TEST_BINARY_LIMIT:-1500}s"
    # A binary that failed or crashed without a failing test counted.
    if [ "$rc" != 0 ] && ! grep -qE '^test result: FAILED' "$log"; then
      echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out (test binary $name exited $rc)"
    fi
  } 9>>"$LANE_DIR/print.lock"
  return 0
}
export -f run_binary
(
  # Doc tests compile while the lanes run.
  limit 1800 cargo test --workspace --doc 2>&1 || echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out (doc tests)"
) >"$LANE_DIR/doc.log" 2>&1 &
doc_pid=$!
xargs -P "${TEST_LANES:-3}" -L 1 bash -c 'run_binary "$0" "$1" "$2"' <"$LANE_DIR/queue" | tee "$TEST_LOG"
wait "$doc_pid" || true
cat "$LANE_DIR/doc.log" | tee -a "$TEST_LOG"
rm -rf "$LANE_DIR" "$ARTIFACTS"
# "test result: ok. 5 passed; 0 failed; 1 ignored; ...", one per test binary.
sum() { grep -E '^test result:' "$TEST_LOG" | grep -oE "[0-9]+ $1" | awk '{s += $1} END {print s + 0}'; }
passed=$(sum passed); failed=$(sum failed); ignored=$(sum ignored)
# A test that found no lab says SKIPPED (bnerd_testkit::report) and then passes: a skip, not
# a pass. Ignored tests are skips too.
skips=$(grep -E '^SKIPPED ' "$TEST_LOG" | sort -u || true)
n_skips=$(grep -c . <<<"$skips" || true)
passed=$((passed - n_skips)); skipped=$((n_skips + ignored))
[ -z "$skips" ] || { echo "skipped:"; echo "$skips"; }
# What the run drew (the lab crash-point sample), to repeat it.
grep -E '^NOTE ' "$TEST_LOG" || true
grep -E '^TIMEOUT' "$TEST_LOG" || true
[ "$failed" = 0 ] || tier_failed "cargo test: $(grep -oE '^== test binary [^ ]+ .*exit [1-9][0-9]*' "$TEST_LOG" | awk '{print $4}' | sort -u | tr '\n' ' ')"

step "points census (docs/performance.md, Crash points)"
# The suites that cover every point report how many they covered (COUNT lines);
# docs/performance.md states the figures ("Crash points"). A different count is a suite that
# covers more or less than the docs say: a failure until one of them is corrected.
reported() { sed -nE "s/^COUNT $1 ([0-9]+)$/\1/p" "$TEST_LOG" | tail -n 1; }
documented() { sed -nE "$1" docs/performance.md | head -n 1; }
crash_row='^\| fake, three clouds.*\| ([0-9]+) same-tenant \+ ([0-9]+) cross-tenant = [0-9]+ \|.*'
faults_row='^\| faults at every call.*\| ([0-9]+) same-tenant \+ ([0-9]+) If-Match \+ ([0-9]+) cross-tenant = [0-9]+ \|.*'
census_failed=0
check_count() {
  local what=$1 got=$2 want=$3
  if [ -n "$want" ] && [ "$got" = "$want" ]; then
    echo "  $what: $got (docs/performance.md: $want)"
  else
    echo "  $what: ${got:-not reported}, docs/performance.md: ${want:-no figure found}: failing"
    failed=$((failed + 1)); census_failed=1
  fi
}
echo "points covered:"
check_count "crash points, fake, same-tenant" "$(reported crash_points.fake.same_tenant)" "$(documented "s/${crash_row}/\1/p")"
check_count "crash points, fake, cross-tenant" "$(reported crash_points.fake.cross_tenant)" "$(documented "s/${crash_row}/\2/p")"
check_count "faults at every call, same-tenant" "$(reported faults.same_tenant)" "$(documented "s/${faults_row}/\1/p")"
check_count "faults at every call, If-Match routes" "$(reported faults.if_match_routes)" "$(documented "s/${faults_row}/\2/p")"
check_count "faults at every call, cross-tenant" "$(reported faults.cross_tenant)" "$(documented "s/${faults_row}/\3/p")"
per_customer_row='^\| `PerCustomer`, fake .*\| ([0-9]+) \|.*'
per_customer_faults_row='^\| `PerCustomer` faults at every call.*\| ([0-9]+) \|.*'
check_count "crash points, fake, PerCustomer" "$(reported crash_points.fake.per_customer)" "$(documented "s/${per_customer_row}/\1/p")"
check_count "faults at every call, PerCustomer" "$(reported faults.per_customer)" "$(documented "s/${per_customer_faults_row}/\1/p")"
check_count "crash points the PerCustomer lab sample draws from" "$(reported crash_points.lab_space.per_customer)" "$(documented 's/^\| `PerCustomer`, lab .*\| [0-9]+ of ([0-9]+) \|.*/\1/p')"
lab_same=$(reported crash_points.lab_space.same_tenant); lab_cross=$(reported crash_points.lab_space.cross_tenant)
check_count "crash points the lab samples from" "$(( ${lab_same:-0} + ${lab_cross:-0} ))" "$(documented 's/^point: ([0-9]+) points, .*/\1/p')"
[ "$census_failed" = 0 ] || tier_failed "points census"
rm -f "$TEST_LOG"

# The chart test and the benchmarks wait on different things (the first apiserver; the CPU; the
# OpenStack lab and the second apiserver), so they run side by side: about two minutes less
# than one after the other. Each one's output is printed whole when it ends.
count_chart() {
  local log=$1 rc=$2 chart
  cat "$log"
  chart=$(sed -nE 's/^chart-test: ([0-9]+) passed.*/\1/p' "$log" | tail -n 1)
  passed=$((passed + ${chart:-0}))
  [ "$rc" = 0 ] || { failed=$((failed + 1)); tier_failed "Helm chart"; }
  rm -f "$log"
}
CHART_LOG=$(mktemp)
if [ "$failed" -gt 0 ]; then
  step "Helm chart against the apiserver"
  chart_rc=0
  limit 1200 bash lab/kube/chart-test.sh >"$CHART_LOG" 2>&1 || chart_rc=$?
  count_chart "$CHART_LOG" "$chart_rc"
  step "benchmarks skipped: $failed failed above"
else
  step "Helm chart against the apiserver, beside the benchmarks"
  (limit 1200 bash lab/kube/chart-test.sh) >"$CHART_LOG" 2>&1 & chart_pid=$!
  # stderr kept: a bench that panics says why (its assertion). The benches are built with the
  # test build's profile and its workspace-wide features, so they reuse every dependency
  # compiled above instead of a release build of their own (on empty caches that build alone
  # took about 370 s). What they assert (call counts, budgets) does not depend on the
  # profile; their times are a debug build's, and the times in docs/performance.md come from
  # a plain `cargo bench` (release).
  BENCH="cargo bench -q --workspace --profile dev"
  FAKE_BENCH_LOG=$(mktemp)
  (
    echo "== benchmark: OpenStack calls per converge / resync"
    limit 1200 $BENCH --bench calls
    echo "== benchmark: estate scale (1000 links, 1000 gateways, fake cloud; docs/performance.md)"
    limit 1200 $BENCH --bench estate
  ) >"$FAKE_BENCH_LOG" 2>&1 & fake_bench_pid=$!
  step "benchmark: against the manual method (raw Neutron floor, openstack CLI, the operator; 1 and 20 links on the labs; docs/performance.md)"
  # One round here (a check that every path still runs, about 2 minutes); the figures in
  # docs/performance.md come from the default three rounds or more. On the second apiserver:
  # the chart test holds the first one's lock.
  MANUAL_ROUNDS=${MANUAL_ROUNDS:-1} BNERD_KUBECONFIG=$KUBECONFIG_2 limit 1200 $BENCH --bench manual 2>&1 | grep -v '^$'
  step "benchmarks on the fake cloud (run beside the one above)"
  fake_bench_rc=0; wait "$fake_bench_pid" || fake_bench_rc=$?
  grep -v '^$' "$FAKE_BENCH_LOG" || true
  rm -f "$FAKE_BENCH_LOG"
  [ "$fake_bench_rc" = 0 ] || { echo "a benchmark on the fake cloud failed (exit $fake_bench_rc)"; exit 1; }
  step "Helm chart against the apiserver (run beside the benchmarks)"
  chart_rc=0; wait "$chart_pid" || chart_rc=$?
  count_chart "$CHART_LOG" "$chart_rc"
fi
step "lab hygiene: the OpenStack lab holds what it held before the tests"
limit 300 "$LAB_PY" lab/openstack/census.py compare "$CENSUS"
rm -f "$CENSUS"
tier="done"
step "done"
