#!/usr/bin/env bash
# Checks the Helm chart charts/bnerd-vpn-operator against the local kubelab apiserver:
# lint, required values, values.schema.json rejections, rendering (env, probes, PDB,
# Service, ServiceMonitor, dashboard, CA bundle, the CRD template), a real server-side
# apply, the operator's RBAC (every verb the binary uses, and denials for what it must
# not do), and `helm upgrade` from chart 0.2.0 (lab/kube/testdata/*-0.2.0.tgz) with a
# ClusterLink in place, then rollback, uninstall and a reinstall: the CRD and the link
# must survive all of it; then `helm upgrade` from chart 0.3.0 (testdata/*-0.3.0.tgz) with a
# values file written for it and a link whose customerProjectID predates the CRD's rule.
#
# Usage: lab/kube/chart-test.sh
# Env:   CHART_TEST_KEEP=1  leave the applied objects in place (for debugging)
#
# The lab runs kube-controller-manager beside the apiserver (lab/kube/README.md): the
# Deployments get ReplicaSets and Pods (Pending for good: there is no scheduler or
# kubelet), the garbage collector removes what a deleted object owned (checked after
# helm uninstall), and the namespace controller empties and removes deleted namespaces:
# every namespace this script deletes must really be gone. The CRD is applied but
# NOT deleted at the end, because other tests share this apiserver and deleting a CRD
# deletes all its objects; the upgrade test strips the Helm ownership it gave the CRD,
# leaving it as a 0.2.0 install leaves it (not owned by any release). The whole run
# holds the e2e tests' lock ($KLAB/e2e.lock), since it changes that shared CRD.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
CHART=charts/bnerd-vpn-operator
OLD_CHART=lab/kube/testdata/bnerd-vpn-operator-0.2.0.tgz
OLD3_CHART=lab/kube/testdata/bnerd-vpn-operator-0.3.0.tgz
VERSION=$(sed -n 's/^version: //p' "$CHART/Chart.yaml")
REL=chart-test
NS=chart-test-bnerd-vpn                # release namespace (created by this script)
CREDS_NS=chart-test-bnerd-vpn-creds    # credentials namespace (created by the chart)
SA=chart-test-bnerd-vpn-operator       # <release>-<chart>, see _helpers.tpl
SA_USER=system:serviceaccount:$NS:$SA
CRD=clusterlinks.ipsec.bnerd.net
CRD_FILE=$CHART/files/$CRD.yaml
ROUTER=11111111-2222-3333-4444-555555555555
TRANSIT=66666666-7777-8888-9999-000000000000
SET_IDS=(--set openstack.routerID=$ROUTER --set openstack.transitNetworkID=$TRANSIT)
SET_REQ=("${SET_IDS[@]}" --set openstack.cloudsSecret=chart-test-clouds)
# The upgrade test's releases, namespaces and link.
UREL=chart-test-up
UREL2=chart-test-up2
UREL3=chart-test-up3
UNS=chart-test-upgrade
UCREDS=chart-test-upgrade-creds
ULINK=chart-test-upgrade-link
ULEGACY=chart-test-upgrade-legacy   # cross-tenant, customerProjectID as 0.3.0 admitted it

T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

for c in jq yq kubectl flock; do
  command -v "$c" >/dev/null || { echo "chart-test: $c not found (Debian packages jq, yq)" >&2; exit 1; }
done
eval "$(lab/kube/build.sh)"
KUBECONFIG=$(lab/kube/up.sh | tail -1)
export KUBECONFIG
helm() { "$HELM_BIN" "$@"; }

PASSED=0
pass() { PASSED=$((PASSED + 1)); echo "ok   $PASSED: $*"; }
fail() { echo "FAIL: $*" >&2; echo "chart-test: $PASSED passed, 1 failed ($(elapsed) s)" >&2; exit 1; }

# The e2e tests take this lock around everything they do on the apiserver (see
# kube_lab_exclusive in crates/operator/tests/e2e.rs); the upgrade test below changes the
# shared CRD and creates a ClusterLink, which must not meet a running operator.
exec 8>"$(dirname "$KUBECONFIG")/e2e.lock"
flock -w 1200 8 || fail "waited 20 min for $(dirname "$KUBECONFIG")/e2e.lock"

TMP=$(mktemp -d)
RENDERED=$TMP/rendered.yaml
APPLIED=0
UPGRADE=0

# delete_ns <ns...>: delete the namespaces and wait until the namespace controller (in the
# lab's kube-controller-manager) has deleted everything in them and removed them (about 5 s,
# so all are deleted first, then waited for). A namespace still Terminating after
# NS_DELETE_TIMEOUT seconds (default 120) is a failure: its conditions
# (NamespaceDeletionContentFailure, NamespaceFinalizersRemaining, ...) say why.
delete_ns() {
  local ns deadline=$((SECONDS + ${NS_DELETE_TIMEOUT:-120}))
  kubectl delete ns "$@" --wait=false --ignore-not-found >/dev/null
  for ns in "$@"; do
    while kubectl get ns "$ns" >/dev/null 2>&1; do
      if ((SECONDS >= deadline)); then
        echo "chart-test: namespace $ns still there ${NS_DELETE_TIMEOUT:-120}s after its delete:" \
          "$(kubectl get ns "$ns" -o json | jq -c '[.status.phase, [.status.conditions[]? | select(.status == "True") | "\(.type): \(.message)"]]')" >&2
        return 1
      fi
      sleep 0.2
    done
  done
}

# disown_crd: the CRD as chart 0.2.0 leaves it (installed from crds/, owned by no release).
disown_crd() {
  kubectl get crd "$CRD" >/dev/null 2>&1 || return 0
  kubectl label crd "$CRD" app.kubernetes.io/managed-by- app.kubernetes.io/instance- \
    app.kubernetes.io/name- app.kubernetes.io/version- helm.sh/chart- >/dev/null
  kubectl annotate crd "$CRD" meta.helm.sh/release-name- meta.helm.sh/release-namespace- \
    helm.sh/resource-policy- >/dev/null
}

# remove_upgrade_test: the upgrade test's releases, link, RBAC and namespaces.
remove_upgrade_test() {
  local r
  for r in "$UREL" "$UREL2" "$UREL3"; do
    helm uninstall "$r" -n "$UNS" --ignore-not-found >/dev/null 2>&1 || true
    kubectl delete clusterrole,clusterrolebinding -l app.kubernetes.io/instance="$r" --ignore-not-found >/dev/null
    kubectl delete role,rolebinding -n default -l app.kubernetes.io/instance="$r" --ignore-not-found >/dev/null
  done
  for l in "$ULINK" "$ULEGACY"; do
    if kubectl get clusterlink "$l" >/dev/null 2>&1; then
      # no operator runs here; a finalizer could only come from someone else's operator
      kubectl patch clusterlink "$l" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
      kubectl delete clusterlink "$l" --ignore-not-found --wait=false >/dev/null
    fi
  done
  kubectl delete secret -n "$UNS" chart-test-clouds --ignore-not-found >/dev/null 2>&1 || true
  # the CRD as the file has it (a failed run may have left the "0.2.0" text), owned by nobody
  kubectl apply --server-side --force-conflicts --field-manager=chart-test -f "$CRD_FILE" >/dev/null || true
  disown_crd
  delete_ns "$UCREDS" "$UNS"
}

cleanup() {
  local rc=$?
  if [[ ${CHART_TEST_KEEP:-0} == 1 ]]; then
    echo "chart-test: CHART_TEST_KEEP=1, leaving objects (rendered manifests: $RENDERED)" >&2
    return "$rc"
  fi
  if [[ $APPLIED == 1 ]]; then
    kubectl delete -f "$RENDERED" --ignore-not-found --wait=false >/dev/null || rc=1
    # the namespace controller deletes what is left in them (Secrets, the Lease, Pods, ...)
    delete_ns "$CREDS_NS" "$NS" || rc=1
    # cluster-scoped RBAC and the Events Role in "default" must be gone
    for o in clusterrole/"$SA" clusterrolebinding/"$SA" clusterrole/"$SA"-gateway-events \
             clusterrolebinding/"$SA"-gateway-events role/"$SA"-events rolebinding/"$SA"-events; do
      if kubectl get -n default "$o" >/dev/null 2>&1; then
        echo "chart-test: cleanup left RBAC $o behind" >&2; rc=1
      fi
    done
  fi
  if [[ $UPGRADE == 1 ]]; then
    remove_upgrade_test || rc=1
  fi
  rm -rf "$TMP"
  return "$rc"
}
trap cleanup EXIT

# Leftovers of an earlier interrupted run (e.g. a Terminating namespace) would break apply.
for ns in "$CREDS_NS" "$NS"; do
  if kubectl get ns "$ns" >/dev/null 2>&1; then
    echo "chart-test: removing leftover namespace $ns" >&2
    # the cluster-scoped objects and those in "default"; delete_ns takes the namespace's own
    helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" --set crds.enabled=false \
      --set clusterLink.credentialsNamespace="$CREDS_NS" \
      | kubectl delete -f - --ignore-not-found --wait=false >/dev/null 2>&1 || true
    delete_ns "$ns"
  fi
done
if kubectl get ns "$UNS" >/dev/null 2>&1 || kubectl get ns "$UCREDS" >/dev/null 2>&1; then
  echo "chart-test: removing the leftovers of an earlier upgrade test" >&2
  remove_upgrade_test
fi

# --- (1) lint -----------------------------------------------------------------
out=$(helm lint --strict "$CHART" "${SET_REQ[@]}" 2>&1) || fail "helm lint --strict: $out"
pass "helm lint --strict"
out=$(helm lint --strict "$CHART" "${SET_REQ[@]}" --set metrics.serviceMonitor.enabled=true \
  --set metrics.dashboard.enabled=true --set-string openstack.caBundle="-----BEGIN CERTIFICATE-----" 2>&1) \
  || fail "helm lint --strict with the ServiceMonitor, dashboard and CA bundle on: $out"
pass "helm lint --strict with every optional object on"
# ClusterLink v0.2.0, reverse routes v0.4.0, cross-tenant links v0.5.0: this is 0.5.0, and
# the crates (the image's version label comes from the workspace) say the same.
[[ $VERSION == 0.5.0 ]] && grep -q '^appVersion: "0.5.0"$' "$CHART/Chart.yaml" \
  || fail "Chart.yaml: version '$VERSION', want 0.5.0 and appVersion \"0.5.0\""
v=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)
[[ $v == "$VERSION" ]] || fail "Cargo.toml [workspace.package] version '$v', the chart's $VERSION"
pass "Chart version and appVersion 0.5.0, as the crates"
[[ ! -e $CHART/crds ]] || fail "$CHART/crds exists: Helm never upgrades crds/, the CRD is a template"
pass "no crds/ directory (the CRD is a template)"

# --- (2) required values --------------------------------------------------------
# expect_fail <what> <grep -E pattern> <helm template args...>
expect_fail() {
  local what=$1 want=$2 out; shift 2
  if out=$(helm template "$REL" "$CHART" -n "$NS" "$@" 2>&1); then fail "$what: rendered, want an error"; fi
  grep -qE -- "$want" <<<"$out" || fail "$what: the error does not say '$want': $out"
  pass "$what: refused ($(grep -oE -- "$want" <<<"$out" | head -1))"
}
expect_fail "openstack.routerID unset" 'openstack.routerID is required'
expect_fail "openstack.transitNetworkID unset" 'openstack.transitNetworkID is required' \
  --set openstack.routerID=$ROUTER
expect_fail "openstack.cloudsSecret unset" \
  "openstack.cloudsSecret is required: .*kubectl -n $NS create secret generic .*--from-file=clouds.yaml" "${SET_IDS[@]}"

# --- (3) values.schema.json -----------------------------------------------------
expect_fail "logFormat=yaml" "at '/logFormat': value must be one of 'json', 'text'" "${SET_REQ[@]}" --set logFormat=yaml
expect_fail "replicaCount=0" "at '/replicaCount': minimum" "${SET_REQ[@]}" --set replicaCount=0
expect_fail "resyncInterval as a number" "at '/resyncInterval': got number, want string" "${SET_REQ[@]}" --set resyncInterval=300
expect_fail "resyncInterval=5x" "at '/resyncInterval': '5x' does not match pattern" "${SET_REQ[@]}" --set-string resyncInterval=5x
expect_fail "leaderElection.leaseDuration=0s" "at '/leaderElection/leaseDuration'" "${SET_REQ[@]}" --set leaderElection.leaseDuration=0s
# The operator refuses a Lease under 6 s (exit 2): the chart must refuse it first, not crash-loop.
expect_fail "leaderElection.leaseDuration=5s" "at '/leaderElection/leaseDuration'" "${SET_REQ[@]}" --set leaderElection.leaseDuration=5s
expect_fail "openstack.routerID not a UUID" "at '/openstack/routerID'" "${SET_REQ[@]}" --set openstack.routerID=gateway-router
expect_fail "openstack.transitNetworkID as a number" "at '/openstack/transitNetworkID'" "${SET_REQ[@]}" --set openstack.transitNetworkID=42
expect_fail "openstack.cloudsSecret not a Secret name" "at '/openstack/cloudsSecret'" "${SET_REQ[@]}" --set openstack.cloudsSecret=My_Secret
expect_fail "openstack.caBundle not PEM" "at '/openstack/caBundle'" "${SET_REQ[@]}" --set openstack.caBundle=/etc/ssl/ca.pem
expect_fail "metrics.port=70000" "at '/metrics/port': maximum" "${SET_REQ[@]}" --set metrics.port=70000
expect_fail "metrics.bindAddress=localhost" "at '/metrics/bindAddress'" "${SET_REQ[@]}" --set metrics.bindAddress=localhost
expect_fail "a misspelt key (replicas)" "additional properties 'replicas' not allowed" "${SET_REQ[@]}" --set replicas=3
expect_fail "podAntiAffinity.type=sometimes" "at '/podAntiAffinity/type'" "${SET_REQ[@]}" --set podAntiAffinity.type=sometimes
expect_fail "crds.keep as a string" "at '/crds/keep'" "${SET_REQ[@]}" --set-string crds.keep=yes
expect_fail "perCustomerTransit.pool not a CIDR" "at '/perCustomerTransit/pool'" "${SET_REQ[@]}" --set perCustomerTransit.pool=10.255.0.0
expect_fail "perCustomerTransit.prefixLength=30" "at '/perCustomerTransit/prefixLength': maximum" "${SET_REQ[@]}" \
  --set perCustomerTransit.pool=10.255.0.0/16 --set perCustomerTransit.prefixLength=30
expect_fail "perCustomerTransit.prefixLength as a string" "at '/perCustomerTransit/prefixLength': got string, want integer" \
  "${SET_REQ[@]}" --set perCustomerTransit.pool=10.255.0.0/16 --set-string perCustomerTransit.prefixLength=28
expect_fail "a misspelt key under perCustomerTransit" "additional properties 'prefixLen' not allowed" "${SET_REQ[@]}" \
  --set perCustomerTransit.prefixLen=28
# the chart's own checks across values
expect_fail "replicaCount=2 without leader election" "replicaCount > 1 needs leaderElection.enabled=true" \
  "${SET_REQ[@]}" --set leaderElection.enabled=false
expect_fail "PDB minAvailable >= replicaCount" 'podDisruptionBudget.minAvailable \(2\) must be below replicaCount \(2\)' \
  "${SET_REQ[@]}" --set podDisruptionBudget.minAvailable=2
expect_fail "caBundle and caBundleConfigMap both set" "openstack.caBundle and openstack.caBundleConfigMap are both set" \
  "${SET_REQ[@]}" --set-string openstack.caBundle="-----BEGIN CERTIFICATE-----" --set openstack.caBundleConfigMap=ca

# --- (4) render -------------------------------------------------------------------
helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" \
  --set clusterLink.credentialsNamespace="$CREDS_NS" >"$RENDERED"
J=$TMP/rendered.json
yq -c 'select(. != null)' "$RENDERED" >"$J"
# obj <kind> [name]: one rendered object as JSON
obj() { jq -c --arg k "$1" --arg n "${2:-}" 'select(.kind == $k and ($n == "" or .metadata.name == $n))' "${J_IN:-$J}"; }
dep() { obj Deployment | jq -c "$@"; }
# env_value <NAME>: the Deployment's env value (or valueFrom as JSON)
env_value() { dep -r --arg n "$1" '.spec.template.spec.containers[0].env[] | select(.name == $n) | (.value // (.valueFrom | tojson))'; }

img=$(dep -r '.spec.template.spec.containers[0].image')
[[ $img == ghcr.io/bnerd/bnerd-vpn-operator:$VERSION ]] || fail "operator image is '$img', want ...:$VERSION (AppVersion)"
pass "operator image defaults to :$VERSION ($img)"

# The gateway images (charts up to 0.3.0): this operator deploys no gateway and never read
# them. Gone from the env; a values file that still sets them renders exactly the same.
for e in IPSEC_GATEWAY_IMAGE IPSEC_GATEWAY_WIREGUARD_IMAGE IPSEC_STATUS_AGENT_IMAGE; do
  [[ -z $(env_value "$e") ]] || fail "$e is still passed to the operator: $(env_value "$e")"
done
pass "no IPSEC_GATEWAY_IMAGE, IPSEC_GATEWAY_WIREGUARD_IMAGE, IPSEC_STATUS_AGENT_IMAGE (never read)"
pinned=$TMP/pinned.yaml
helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" --set clusterLink.credentialsNamespace="$CREDS_NS" \
  --set images.gateway.tag=0.3.1 --set images.statusAgent.repository=registry.example/agent >"$pinned" \
  || fail "a values file with the old images.* keys is refused"
diff "$RENDERED" "$pinned" >/dev/null || fail "the old images.* values change the render: $(diff "$RENDERED" "$pinned" | head)"
pass "old images.gateway.tag / images.statusAgent.repository accepted and change nothing"
expect_fail "a misspelt key under images" "additional properties 'gatway' not allowed" "${SET_REQ[@]}" --set images.gatway.tag=1

for kv in IPSEC_GATEWAY_ROUTER_ID=$ROUTER IPSEC_TRANSIT_NETWORK_ID=$TRANSIT \
          IPSEC_RESYNC_INTERVAL=5m IPSEC_CLUSTERLINK_CREDENTIALS_NAMESPACE=$CREDS_NS IPSEC_CONCURRENCY=4 \
          OS_CLOUD=openstack OS_CLIENT_CONFIG_FILE=/etc/openstack/clouds.yaml RUST_LOG=info \
          IPSEC_LOG_FORMAT=json IPSEC_METRICS_ADDR=0.0.0.0:8080 IPSEC_LEADER_ELECT=true \
          IPSEC_LEASE_NAME=$SA IPSEC_LEASE_DURATION=15s; do
  v=$(env_value "${kv%%=*}")
  [[ $v == "${kv#*=}" ]] || fail "env ${kv%%=*} is '$v', want '${kv#*=}'"
done
pass "env IPSEC_*/OS_*/RUST_LOG values (log format json, metrics 0.0.0.0:8080, lease = fullname, 15s)"
# The drift check: empty driftCheckInterval leaves the operator's default (nothing passed); a
# set one is passed; the replaced crossTenantLegCheckInterval goes on under its old name only
# while driftCheckInterval is empty (an old values file keeps its setting, and the operator
# warns about the name).
for e in IPSEC_DRIFT_CHECK_INTERVAL IPSEC_CROSS_TENANT_LEG_CHECK_INTERVAL; do
  [[ -z $(env_value "$e") ]] || fail "$e is passed by default: $(env_value "$e")"
done
drift_env() {
  helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" "$@" \
    | yq -c 'select(.kind == "Deployment") | [.spec.template.spec.containers[0].env[] | select(.name == "IPSEC_DRIFT_CHECK_INTERVAL" or .name == "IPSEC_CROSS_TENANT_LEG_CHECK_INTERVAL") | .name + "=" + .value]'
}
got=$(drift_env --set-string clusterLink.driftCheckInterval=5s)
[[ $got == '["IPSEC_DRIFT_CHECK_INTERVAL=5s"]' ]] || fail "driftCheckInterval=5s renders $got"
got=$(drift_env --set-string clusterLink.crossTenantLegCheckInterval=30s)
[[ $got == '["IPSEC_CROSS_TENANT_LEG_CHECK_INTERVAL=30s"]' ]] || fail "crossTenantLegCheckInterval=30s alone renders $got"
got=$(drift_env --set-string clusterLink.crossTenantLegCheckInterval=30s --set-string clusterLink.driftCheckInterval=3s)
[[ $got == '["IPSEC_DRIFT_CHECK_INTERVAL=3s"]' ]] || fail "both set render $got"
pass "drift check: nothing by default, driftCheckInterval passed, the replaced crossTenantLegCheckInterval only alone"
expect_fail "clusterLink.driftCheckInterval=2x" "at '/clusterLink/driftCheckInterval'" "${SET_REQ[@]}" \
  --set-string clusterLink.driftCheckInterval=2x
# PerCustomer transit isolation: both variables or neither (the operator refuses a prefix
# length without a pool), so nothing by default, even with prefixLength changed.
for e in IPSEC_PER_CUSTOMER_TRANSIT_POOL IPSEC_PER_CUSTOMER_TRANSIT_PREFIX_LENGTH; do
  [[ -z $(env_value "$e") ]] || fail "$e is passed without perCustomerTransit.pool: $(env_value "$e")"
done
n=$(helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" --set perCustomerTransit.prefixLength=26 \
  | yq -c 'select(.kind == "Deployment") | [.spec.template.spec.containers[0].env[] | select(.name | startswith("IPSEC_PER_CUSTOMER_"))] | length')
[[ $n == 0 ]] || fail "perCustomerTransit.prefixLength without a pool renders $n IPSEC_PER_CUSTOMER_* variables"
pass "no IPSEC_PER_CUSTOMER_TRANSIT_* without perCustomerTransit.pool (not even with prefixLength set)"
per_customer_env() {
  helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" "$@" | yq -c 'select(.kind == "Deployment")' \
    | jq -r '[.spec.template.spec.containers[0].env[] | select(.name | startswith("IPSEC_PER_CUSTOMER_")) | "\(.name)=\(.value)"] | join(" ")'
}
v=$(per_customer_env --set perCustomerTransit.pool=10.255.0.0/16)
[[ $v == "IPSEC_PER_CUSTOMER_TRANSIT_POOL=10.255.0.0/16 IPSEC_PER_CUSTOMER_TRANSIT_PREFIX_LENGTH=28" ]] \
  || fail "perCustomerTransit.pool=10.255.0.0/16 renders '$v'"
v=$(per_customer_env --set perCustomerTransit.pool=100.127.0.0/20 --set perCustomerTransit.prefixLength=29)
[[ $v == "IPSEC_PER_CUSTOMER_TRANSIT_POOL=100.127.0.0/20 IPSEC_PER_CUSTOMER_TRANSIT_PREFIX_LENGTH=29" ]] \
  || fail "perCustomerTransit.pool/prefixLength render '$v'"
pass "perCustomerTransit.pool and .prefixLength reach the env once a pool is set (prefix length 28 by default)"
[[ $(env_value POD_NAME) == '{"fieldRef":{"fieldPath":"metadata.name"}}' ]] \
  || fail "POD_NAME does not come from fieldRef metadata.name: $(env_value POD_NAME)"
[[ $(env_value POD_NAMESPACE) == '{"fieldRef":{"fieldPath":"metadata.namespace"}}' ]] \
  || fail "POD_NAMESPACE does not come from fieldRef metadata.namespace: $(env_value POD_NAMESPACE)"
[[ $(env_value POD_UID) == '{"fieldRef":{"fieldPath":"metadata.uid"}}' ]] \
  || fail "POD_UID does not come from fieldRef metadata.uid: $(env_value POD_UID)"
pass "POD_NAME, POD_NAMESPACE and POD_UID from the downward API"
[[ -z $(env_value OS_CACERT) ]] || fail "OS_CACERT set without a CA bundle"
pass "no OS_CACERT without a CA bundle"
v=$(helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" --set logFormat=text --set metrics.port=9090 \
    --set leaderElection.leaseDuration=30s --set metrics.bindAddress='[::]' | yq -c 'select(. != null)' \
  | jq -r 'select(.kind == "Deployment") | .spec.template.spec.containers[0] | [(.env[] | select(.name | test("IPSEC_(LOG_FORMAT|METRICS_ADDR|LEASE_DURATION)")) | .value), (.ports[0].containerPort | tostring)] | join(" ")')
[[ $v == "text [::]:9090 30s 9090" ]] || fail "logFormat/metrics/leaseDuration values not rendered: '$v'"
pass "logFormat, metrics.bindAddress/port and leaderElection.leaseDuration reach the env ($v)"

v=$(dep -c '.spec.template.spec.containers[0].ports')
[[ $v == '[{"name":"metrics","containerPort":8080,"protocol":"TCP"}]' ]] || fail "container ports: $v"
pass "container port 'metrics' 8080"
for p in startupProbe:/healthz livenessProbe:/healthz readinessProbe:/readyz; do
  v=$(dep -r ".spec.template.spec.containers[0].${p%%:*} | \"\(.httpGet.path) \(.httpGet.port)\"")
  [[ $v == "${p#*:} metrics" ]] || fail "${p%%:*} is '$v', want ${p#*:} on port metrics"
done
v=$(dep -r '.spec.template.spec.containers[0] | [.startupProbe.periodSeconds * .startupProbe.failureThreshold, .livenessProbe.periodSeconds * .livenessProbe.failureThreshold, .readinessProbe.periodSeconds] | map(tostring) | join(" ")')
[[ $v == "60 30 5" ]] || fail "probe timing (startup window, liveness window, readiness period) is '$v', want '60 30 5'"
pass "probes: startup and liveness on /healthz (60 s to start, restart after 30 s dead), readiness on /readyz every 5 s"

v=$(dep -c '[.spec.replicas, .spec.strategy.type, .spec.strategy.rollingUpdate.maxUnavailable, .spec.strategy.rollingUpdate.maxSurge]')
[[ $v == '[2,"RollingUpdate",0,1]' ]] \
  || fail "replicas/strategy: $v, want 2 and RollingUpdate maxUnavailable 0 / maxSurge 1"
pass "2 replicas, RollingUpdate maxUnavailable 0 / maxSurge 1 (no Recreate)"
v=$(helm template "$REL" "$CHART" "${SET_REQ[@]}" --set replicaCount=1 --set updateStrategy.type=Recreate | yq -c 'select(.kind == "Deployment") | .spec.strategy')
[[ $v == '{"type":"Recreate"}' ]] || fail "updateStrategy.type=Recreate renders $v (rollingUpdate must go)"
pass "updateStrategy.type=Recreate drops the rollingUpdate block"
v=$(helm template "$REL" "$CHART" "${SET_REQ[@]}" --set replicaCount=1 --set leaderElection.enabled=false | yq -c 'select(.kind == "Deployment") | .spec.strategy')
[[ $v == '{"type":"Recreate"}' ]] || fail "leaderElection.enabled=false renders $v: a rolling update would run two unelected writers"
pass "leaderElection.enabled=false rolls out as Recreate (an unelected pod never overlaps another)"
v=$(dep -c '.spec.template.spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm | [.topologyKey, .labelSelector.matchLabels["app.kubernetes.io/instance"]]')
[[ $v == '["kubernetes.io/hostname","chart-test"]' ]] || fail "soft pod anti-affinity across nodes missing: $v"
pass "pod anti-affinity: preferred across nodes by default"
v=$(helm template "$REL" "$CHART" "${SET_REQ[@]}" --set podAntiAffinity.type=hard | yq -c 'select(.kind == "Deployment") | .spec.template.spec.affinity.podAntiAffinity | keys')
[[ $v == '["requiredDuringSchedulingIgnoredDuringExecution"]' ]] || fail "podAntiAffinity.type=hard: $v"
v=$(helm template "$REL" "$CHART" "${SET_REQ[@]}" --set-json 'affinity={"nodeAffinity":{}}' | yq -c 'select(.kind == "Deployment") | .spec.template.spec.affinity | keys')
[[ $v == '["nodeAffinity"]' ]] || fail "an explicit affinity does not replace the default anti-affinity: $v"
pass "podAntiAffinity.type=hard is required; an explicit affinity replaces the preset"

v=$(obj PodDisruptionBudget "$SA" | jq -c '[.spec.minAvailable, .spec.unhealthyPodEvictionPolicy, .spec.selector.matchLabels["app.kubernetes.io/instance"]]')
[[ $v == '[1,"AlwaysAllow","chart-test"]' ]] || fail "PodDisruptionBudget: $v"
pass "PodDisruptionBudget minAvailable 1 (unhealthy pods always evictable)"
n=$(helm template "$REL" "$CHART" "${SET_REQ[@]}" --set replicaCount=1 | grep -c '^kind: PodDisruptionBudget$' || true)
[[ $n == 0 ]] || fail "replicaCount=1 still renders a PodDisruptionBudget (it would block every drain)"
v=$(helm template "$REL" "$CHART" "${SET_REQ[@]}" --set replicaCount=3 --set podDisruptionBudget.minAvailable=null --set podDisruptionBudget.maxUnavailable=1 \
  | yq -c 'select(.kind == "PodDisruptionBudget") | .spec | [.minAvailable, .maxUnavailable]')
[[ $v == '[null,1]' ]] || fail "PDB with maxUnavailable: $v"
pass "no PDB with replicaCount=1; maxUnavailable instead of minAvailable when set"

v=$(obj Service "$SA-metrics" | jq -c '[.spec.type, .spec.ports, .spec.selector["app.kubernetes.io/instance"], .metadata.labels["app.kubernetes.io/component"]]')
[[ $v == '["ClusterIP",[{"name":"metrics","port":8080,"targetPort":"metrics","protocol":"TCP"}],"chart-test","metrics"]' ]] \
  || fail "metrics Service: $v"
pass "metrics Service $SA-metrics on port metrics"
[[ -z $(obj ServiceMonitor) ]] || fail "a ServiceMonitor is rendered by default"
sm=$(helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" --set metrics.serviceMonitor.enabled=true \
  --set metrics.serviceMonitor.interval=15s --set metrics.serviceMonitor.labels.release=prom | yq -c 'select(.kind == "ServiceMonitor")')
v=$(jq -c '[.apiVersion, .metadata.labels.release, .spec.endpoints[0].port, .spec.endpoints[0].path, .spec.endpoints[0].interval, .spec.selector.matchLabels["app.kubernetes.io/component"], .spec.namespaceSelector.matchNames]' <<<"$sm")
[[ $v == '["monitoring.coreos.com/v1","prom","metrics","/metrics","15s","metrics",["chart-test-bnerd-vpn"]]' ]] \
  || fail "ServiceMonitor: $v"
pass "ServiceMonitor off by default; on: monitoring.coreos.com/v1, port metrics, interval and labels from values"
expect_fail "ServiceMonitor without the Service" "metrics.serviceMonitor.enabled needs metrics.service.enabled" \
  "${SET_REQ[@]}" --set metrics.serviceMonitor.enabled=true --set metrics.service.enabled=false

DASH=$CHART/dashboards/bnerd-vpn-operator.json
jq -e '.panels | length > 0' "$DASH" >/dev/null || fail "$DASH is not a dashboard JSON"
METRICS="bnerd_reconciles_total bnerd_reconcile_duration_seconds bnerd_reconcile_failures_total bnerd_openstack_requests_total bnerd_clusterlink_condition bnerd_leader bnerd_fabric_check_ok bnerd_drift_repairs_total"
exprs=$(jq -r '.. | .expr? // empty' "$DASH")
for m in $METRICS; do grep -q "\b$m\b\|\b${m}_bucket\b" <<<"$exprs" || fail "the dashboard does not use $m"; done
unknown=$(grep -oE 'bnerd_[a-z_]+' <<<"$exprs" | sed 's/_bucket$//' | sort -u | grep -vxF -f <(tr ' ' '\n' <<<"$METRICS") || true)
[[ -z $unknown ]] || fail "the dashboard queries metrics the operator does not export: $unknown"
pass "dashboard JSON: $(jq '.panels | length' "$DASH") panels over exactly the operator's 8 metrics"
[[ -z $(obj ConfigMap "$SA-dashboard") ]] || fail "the dashboard ConfigMap is rendered by default"
v=$(helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" --set metrics.dashboard.enabled=true | yq -c 'select(.kind == "ConfigMap")' \
  | jq -r '[.metadata.labels.grafana_dashboard, (.data["bnerd-vpn-operator.json"] | fromjson | .uid)] | join(" ")')
[[ $v == "1 bnerd-vpn-operator" ]] || fail "dashboard ConfigMap: '$v'"
pass "dashboard ConfigMap (label grafana_dashboard=1) with the JSON only when metrics.dashboard.enabled"

PEM=$(printf -- '-----BEGIN CERTIFICATE-----\nMIIBchart-test\n-----END CERTIFICATE-----\n')
ca=$TMP/ca.json
helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" --set-string openstack.caBundle="$PEM" | yq -c 'select(. != null)' >"$ca"
v=$(J_IN=$ca obj ConfigMap "$SA-ca" | jq -r '.data["ca.crt"]')
[[ $v == "$(printf '%s' "$PEM")" ]] || fail "CA ConfigMap holds '$v'"
[[ $(J_IN=$ca env_value OS_CACERT) == /etc/openstack/ca/ca.crt ]] || fail "OS_CACERT with a caBundle: $(J_IN=$ca env_value OS_CACERT)"
v=$(J_IN=$ca dep -c '.spec.template.spec | [(.containers[0].volumeMounts[] | select(.name == "ca-bundle") | [.mountPath, .readOnly]), (.volumes[] | select(.name == "ca-bundle") | .configMap)]')
[[ $v == '[["/etc/openstack/ca",true],{"name":"chart-test-bnerd-vpn-operator-ca","items":[{"key":"ca.crt","path":"ca.crt"}]}]' ]] \
  || fail "CA bundle mount: $v"
J_IN=$ca dep -e '.spec.template.metadata.annotations["checksum/ca-bundle"] | length == 64' >/dev/null \
  || fail "no checksum/ca-bundle pod annotation (a new CA would not roll the pods)"
pass "openstack.caBundle: ConfigMap $SA-ca mounted read-only at /etc/openstack/ca/ca.crt, OS_CACERT set, pods roll on change"
v=$(helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" --set openstack.caBundleConfigMap=corp-ca --set openstack.caBundleConfigMapKey=bundle.pem \
  | yq -c 'select(. != null)' | jq -c 'select(.kind == "ConfigMap" or .kind == "Deployment") | [.kind, (.spec.template.spec.volumes[]? | select(.name == "ca-bundle") | .configMap), (.spec.template.spec.containers[0].env[]? | select(.name == "OS_CACERT") | .value)]' | paste -sd' ')
[[ $v == '["Deployment",{"name":"corp-ca","items":[{"key":"bundle.pem","path":"ca.crt"}]},"/etc/openstack/ca/ca.crt"]' ]] \
  || fail "openstack.caBundleConfigMap: $v"
pass "openstack.caBundleConfigMap: the existing ConfigMap's key mounted as ca.crt, no ConfigMap rendered"

v=$(dep -c '.spec.template.spec | [(.containers[0].volumeMounts[] | select(.name == "clouds-yaml") | [.mountPath, .readOnly]), (.volumes[] | select(.name == "clouds-yaml") | .secret.secretName)]')
[[ $v == '[["/etc/openstack/clouds.yaml",true],"chart-test-clouds"]' ]] || fail "clouds.yaml mount: $v"
pass "clouds.yaml mounted read-only from openstack.cloudsSecret"
v=$(dep -c '.spec.template.spec | [.securityContext.runAsUser, .securityContext.runAsNonRoot, .containers[0].securityContext.readOnlyRootFilesystem, .containers[0].securityContext.allowPrivilegeEscalation, .containers[0].securityContext.capabilities.drop]')
[[ $v == '[65532,true,true,false,["ALL"]]' ]] || fail "securityContext: $v"
pass "securityContext: UID 65532, runAsNonRoot, readOnlyRootFilesystem, no privilege escalation, drop ALL"
obj ClusterRole | jq -s -e '[.[].rules[].resources[]] | any(. == "secrets")' >/dev/null && fail "a ClusterRole mentions secrets"
pass "no Secrets in any ClusterRole"
# Each grant where it is used: Secrets only in the credentials namespace, the Lease by name,
# Events in "default" and the release namespace, cluster-wide only in their own ClusterRole.
v=$(jq -s -c '[.[] | select(.kind == "Role" or .kind == "ClusterRole") | [.kind, .metadata.name, .metadata.namespace, [.rules[] | [(.resources | join(",")), (.resourceNames // [] | join(",")), (.verbs | join(","))]]]] | sort' "$J")
want=$(jq -n -c --arg sa "$SA" --arg ns "$NS" --arg creds "$CREDS_NS" '[
  ["ClusterRole", $sa, null, [["clusterlinks", "", "list,watch,patch"], ["clusterlinks/status", "", "patch"], ["ipsecgateways,vpngateways", "", "list,watch"]]],
  ["ClusterRole", "\($sa)-gateway-events", null, [["events", "", "create,patch"]]],
  ["Role", "\($sa)-credentials", $creds, [["secrets", "", "get,list,watch"]]],
  ["Role", "\($sa)-events", "default", [["events", "", "create,patch"]]],
  ["Role", "\($sa)-events", $ns, [["events", "", "create,patch"]]],
  ["Role", "\($sa)-leases", $ns, [["leases", $sa, "get,patch"], ["leases", "", "create"]]]] | sort')
[[ $v == "$want" ]] || fail "rendered RBAC rules: $v, want $want"
pass "rendered RBAC: ClusterRole (no Events), $SA-gateway-events (Events only), Secrets Role in $CREDS_NS, Events Roles in default and $NS, Lease Role by name (create unnamed)"
v=$(helm template "$REL" "$CHART" -n default "${SET_REQ[@]}" | yq -c 'select(.kind == "Role" or .kind == "RoleBinding") | select(.metadata.name | test("-events$")) | [.kind, .metadata.namespace]' | paste -sd' ')
[[ $v == '["Role","default"] ["RoleBinding","default"]' ]] || fail "release namespace default: Events Roles $v"
pass "release namespace default: one Events Role and RoleBinding there, not two of the same name"
[[ $(grep -c '^kind: Namespace$' "$RENDERED") == 1 ]] || fail "want exactly one Namespace (credentials) in the render"
n=$(helm template "$REL" "$CHART" "${SET_REQ[@]}" --set clusterLink.createCredentialsNamespace=false | grep -c '^kind: Namespace$' || true)
[[ $n == 0 ]] || fail "createCredentialsNamespace=false still renders a Namespace"
pass "credentials Namespace rendered only when createCredentialsNamespace=true"

# The CRD template: the generated file plus the release's labels and the keep policy.
v=$(obj CustomResourceDefinition "$CRD" | jq -c '[.metadata.annotations, .metadata.labels["helm.sh/chart"], .metadata.labels["app.kubernetes.io/managed-by"]]')
[[ $v == '[{"helm.sh/resource-policy":"keep"},"bnerd-vpn-operator-'"$VERSION"'","Helm"]' ]] || fail "CRD metadata: $v"
diff <(obj CustomResourceDefinition "$CRD" | jq -S 'del(.metadata.labels, .metadata.annotations)') \
     <(yq -S . "$CRD_FILE") >/dev/null || fail "the rendered CRD differs from $CRD_FILE"
pass "CRD rendered from $CRD_FILE unchanged, with the chart's labels and helm.sh/resource-policy: keep"
n=$(helm template "$REL" "$CHART" "${SET_REQ[@]}" --set crds.enabled=false | grep -c '^kind: CustomResourceDefinition$' || true)
[[ $n == 0 ]] || fail "crds.enabled=false still renders the CRD"
v=$(helm template "$REL" "$CHART" "${SET_REQ[@]}" --set crds.keep=false | yq -c 'select(.kind == "CustomResourceDefinition") | .metadata.annotations')
[[ $v == null ]] || fail "crds.keep=false still annotates the CRD: $v"
pass "crds.enabled=false renders no CRD; crds.keep=false drops the keep policy"

# NOTES.txt (helm template does not render it; a client-side dry run does)
notes() {
  helm install "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" --dry-run=client --set crds.enabled=false \
    --set clusterLink.createCredentialsNamespace=false "$@" 2>&1 | sed -n '/^NOTES:/,$p'
}
out=$(notes)
for want in 'kubectl get clusterlinks' 'kubectl describe clusterlink <name>' 'kubectl clusterlink doctor' \
            "get lease $SA -o jsonpath='{.spec.holderIdentity}'" 'logs "$LEADER"' 'port-forward "pod/$LEADER" 8080' '/metrics'; do
  grep -qF -- "$want" <<<"$out" || fail "NOTES.txt lacks '$want': $out"
done
grep -q WARNING <<<"$out" && fail "NOTES.txt warns with 2 replicas: $out"
out=$(notes --set replicaCount=1 --set leaderElection.enabled=false)
grep -q 'WARNING: replicaCount is 1' <<<"$out" || fail "NOTES.txt does not warn about replicaCount 1"
grep -q 'lease' <<<"$out" && fail "NOTES.txt names a Lease without leader election: $out"
pass "NOTES.txt: get/describe/doctor, the leader's logs and metrics, a warning only with replicaCount 1, no Lease without election"

# --- (5) real server-side apply ---------------------------------------------------
# The CRD straight from the file (other tests share it; it stays), the chart without it.
kubectl apply --server-side --force-conflicts --field-manager=chart-test -f "$CRD_FILE" >/dev/null \
  || fail "apply CRD $CRD_FILE"
kubectl wait --for condition=established --timeout=30s crd/"$CRD" >/dev/null || fail "CRD not Established"
pass "CRD applied and Established"
helm template "$REL" "$CHART" -n "$NS" "${SET_REQ[@]}" --set crds.enabled=false \
  --set clusterLink.credentialsNamespace="$CREDS_NS" >"$RENDERED"

kubectl create namespace "$NS" >/dev/null || fail "create namespace $NS"
APPLIED=1
out=$(kubectl apply --server-side --field-manager=chart-test -f "$RENDERED" 2>&1) \
  || fail "server-side apply of the rendered chart: $out"
pass "server-side apply ($(grep -c . <<<"$out") objects)"
kubectl get -n "$NS" deployment/"$SA" serviceaccount/"$SA" role/"$SA"-leases rolebinding/"$SA"-leases \
    role/"$SA"-events rolebinding/"$SA"-events service/"$SA"-metrics poddisruptionbudget/"$SA" >/dev/null \
  && kubectl get -n "$CREDS_NS" role/"$SA"-credentials rolebinding/"$SA"-credentials >/dev/null \
  && kubectl get -n default role/"$SA"-events rolebinding/"$SA"-events >/dev/null \
  && kubectl get clusterrole/"$SA" clusterrolebinding/"$SA" clusterrole/"$SA"-gateway-events \
       clusterrolebinding/"$SA"-gateway-events >/dev/null \
  || fail "applied objects not found"
pass "Deployment, ServiceAccount, Service, PDB, Roles, ClusterRole(Binding) exist"
# Talking to the cluster (a server dry run), NOTES says when the clouds.yaml Secret is missing.
snotes() {
  helm install "$REL-notes" "$CHART" -n "$NS" "${SET_IDS[@]}" --dry-run=server --set crds.enabled=false \
    --set clusterLink.createCredentialsNamespace=false "$@" 2>&1 | sed -n '/^NOTES:/,$p'
}
kubectl create secret generic chart-test-notes-clouds -n "$NS" --from-literal=clouds.yaml='clouds: {}' >/dev/null
grep -q "WARNING: Secret $NS/chart-test-no-such-secret (openstack.cloudsSecret) does not exist" \
  <<<"$(snotes --set openstack.cloudsSecret=chart-test-no-such-secret)" || fail "NOTES.txt does not warn about a missing clouds Secret"
out=$(snotes --set openstack.cloudsSecret=chart-test-notes-clouds)
grep -q "does not exist" <<<"$out" && fail "NOTES.txt warns about an existing clouds Secret: $out"
kubectl delete secret chart-test-notes-clouds -n "$NS" >/dev/null
pass "NOTES.txt warns (server dry run) when openstack.cloudsSecret names no Secret, and only then"

# --- (6) RBAC -------------------------------------------------------------------
# can <yes|no> <verb> <resource> [kubectl flags...]
can() {
  local want=$1; shift
  local got
  got=$(kubectl auth can-i "$@" --as="$SA_USER" 2>/dev/null || true)
  [[ $got == "$want" ]] || fail "can-i $* as $SA_USER: got '$got', want '$want'"
  pass "can-i $* -> $want"
}
CL=clusterlinks.ipsec.bnerd.net
EV=events.events.k8s.io
LE=leases.coordination.k8s.io
# what the binary does (see the comments in the RBAC templates for the code behind each)
for v in list watch patch; do can yes "$v" "$CL"; done
can yes patch "$CL" --subresource=status
# Events: ClusterLinks' in default, its own in the release namespace, gateway Warnings in any
# namespace (the gateway-events ClusterRole; without it, below, only the first two remain).
for ns in default "$NS" some-gateway-namespace; do
  can yes create "$EV" -n "$ns"
  can yes patch "$EV" -n "$ns"
done
for v in get list watch; do can yes "$v" secrets -n "$CREDS_NS"; done
# the Lease: get and patch by its name; create cannot be limited by name
for v in get patch; do can yes "$v" "$LE/$SA" -n "$NS"; done
can yes create "$LE" -n "$NS"
# what it must not
for v in get create update delete deletecollection; do can no "$v" "$CL"; done
can no update "$CL" --subresource=status
can no get "$CL" --subresource=status
can no update "$CL" --subresource=finalizers
for v in get list update delete; do can no "$v" "$EV" -n default; done
can no create events -n default          # core/v1 Events: the Recorder writes events.k8s.io only
for v in create update patch delete; do can no "$v" secrets -n "$CREDS_NS"; done
can no get secrets -n default
can no get secrets -n kube-system
can no get secrets -n "$NS"              # not even the clouds.yaml Secret: it is a volume
can no list secrets -A
can no watch secrets -A
for v in list watch; do can no "$v" secrets -n default; done
for v in get patch update delete; do can no "$v" "$LE/other-lease" -n "$NS"; done  # another Lease
for v in update delete; do can no "$v" "$LE/$SA" -n "$NS"; done  # kube-lease-manager never updates or deletes
for v in get list watch update delete; do can no "$v" "$LE" -n "$NS"; done  # no name: any Lease
can no get "$LE/$SA" -n kube-system
can no create "$LE" -n default
can no get pods -n "$NS"
can no get configmaps -n "$NS"
can no patch customresourcedefinitions.apiextensions.k8s.io
can no create namespaces

# Real SubjectAccessReviews (not via can-i; also for the gateway kinds, whose CRDs may
# not exist yet, so kubectl discovery cannot resolve them).
sar() { # sar <verb> <group> <resource> <namespace or ""> -> status.allowed
  kubectl create -o jsonpath='{.status.allowed}' -f - <<SAR
apiVersion: authorization.k8s.io/v1
kind: SubjectAccessReview
spec:
  user: $SA_USER
  groups: [system:serviceaccounts, "system:serviceaccounts:$NS", system:authenticated]
  resourceAttributes:
    verb: "$1"
    group: "$2"
    resource: "$3"
    namespace: "$4"
SAR
}
expect_sar() { # expect_sar <true|false> <verb> <group> <resource> <namespace>
  local want=$1 got; shift
  got=$(sar "$@") || fail "SubjectAccessReview $* failed"
  [[ $got == "$want" ]] || fail "SubjectAccessReview $* as $SA_USER: allowed='$got', want '$want'"
  pass "SubjectAccessReview $1 ${2:-core}/$3 ns='${4}' -> $want"
}
expect_sar false get "" secrets kube-system
expect_sar false get "" secrets default
expect_sar true get "" secrets "$CREDS_NS"
for k in ipsecgateways vpngateways; do
  expect_sar true list ipsec.bnerd.net "$k" ""
  expect_sar true watch ipsec.bnerd.net "$k" ""
  expect_sar false get ipsec.bnerd.net "$k" ""
  expect_sar false patch ipsec.bnerd.net "$k" ""
  expect_sar false update ipsec.bnerd.net "$k" ""
done

# And real requests while impersonating the ServiceAccount.
kubectl create secret generic chart-test-creds -n "$CREDS_NS" --from-literal=k=v >/dev/null
kubectl get secret chart-test-creds -n "$CREDS_NS" --as="$SA_USER" >/dev/null 2>&1 \
  || fail "ServiceAccount cannot read a Secret in $CREDS_NS"
pass "impersonated GET of a Secret in $CREDS_NS succeeds"
if out=$(kubectl get secrets -n kube-system --as="$SA_USER" 2>&1); then
  fail "ServiceAccount can list Secrets in kube-system"
fi
grep -q Forbidden <<<"$out" || fail "listing kube-system Secrets failed, but not with Forbidden: $out"
pass "impersonated LIST of Secrets in kube-system is Forbidden"
# the Lease as kube-lease-manager handles it: create, take (server-side apply), renew (patch)
lease=$TMP/lease.json
echo '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"'"$SA"'"}}' >"$lease"
kubectl create -n "$NS" -f "$lease" --as="$SA_USER" >/dev/null || fail "ServiceAccount cannot create its Lease"
kubectl apply --server-side -n "$NS" --as="$SA_USER" --field-manager=chart-test-lease -f - >/dev/null <<JSON \
  || fail "ServiceAccount cannot take its Lease with server-side apply"
{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"$SA"},"spec":{"holderIdentity":"pod-a","leaseDurationSeconds":15}}
JSON
kubectl patch lease "$SA" -n "$NS" --as="$SA_USER" --type=strategic -p '{"spec":{"leaseTransitions":1}}' >/dev/null \
  || fail "ServiceAccount cannot renew its Lease with a strategic merge patch"
[[ $(kubectl get lease "$SA" -n "$NS" --as="$SA_USER" -o jsonpath='{.spec.holderIdentity}') == pod-a ]] \
  || fail "ServiceAccount cannot read its Lease back"
if kubectl delete lease "$SA" -n "$NS" --as="$SA_USER" >/dev/null 2>&1; then fail "ServiceAccount deleted its Lease"; fi
pass "impersonated Lease create, server-side apply, patch and get succeed; delete is Forbidden"
kubectl create -n "$NS" -f - >/dev/null <<JSON || fail "create another Lease as admin"
{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"chart-test-other-lease"},"spec":{"holderIdentity":"someone-else"}}
JSON
out=$(kubectl get lease chart-test-other-lease -n "$NS" --as="$SA_USER" 2>&1) && fail "ServiceAccount read another Lease"
grep -q Forbidden <<<"$out" || fail "reading another Lease failed, but not with Forbidden: $out"
out=$(kubectl patch lease chart-test-other-lease -n "$NS" --as="$SA_USER" --type=merge -p '{"spec":{"holderIdentity":"pod-a"}}' 2>&1) \
  && fail "ServiceAccount took another Lease"
grep -q Forbidden <<<"$out" || fail "patching another Lease failed, but not with Forbidden: $out"
kubectl delete lease chart-test-other-lease -n "$NS" >/dev/null
pass "impersonated GET and PATCH of another Lease in $NS are Forbidden"

# The cluster-wide Event grant is for gateway Warnings alone: without its binding the
# ClusterLink and operator Events keep their Roles, and every other namespace is denied.
kubectl delete clusterrolebinding "$SA"-gateway-events >/dev/null || fail "delete clusterrolebinding $SA-gateway-events"
for i in $(seq 50); do
  [[ $(kubectl auth can-i create "$EV" -n some-gateway-namespace --as="$SA_USER" 2>/dev/null || true) == no ]] && break
  sleep 0.1
done
for ns in default "$NS"; do
  can yes create "$EV" -n "$ns"
  can yes patch "$EV" -n "$ns"
done
for ns in some-gateway-namespace kube-system "$CREDS_NS"; do
  can no create "$EV" -n "$ns"
  can no patch "$EV" -n "$ns"
done
kubectl apply --server-side --field-manager=chart-test -f "$RENDERED" >/dev/null || fail "re-apply the rendered chart"
for i in $(seq 50); do
  [[ $(kubectl auth can-i create "$EV" -n some-gateway-namespace --as="$SA_USER" 2>/dev/null || true) == yes ]] && break
  sleep 0.1
done
can yes create "$EV" -n some-gateway-namespace

# --- (7) helm upgrade from chart 0.2.0 ------------------------------------------------
# A cluster that ran 0.2.0 has the CRD from crds/, owned by no release. On this shared
# apiserver the CRD already exists, so the 0.2.0 install below skips crds/ exactly as a
# second install would; make it "old" (no Helm ownership, a schema text 0.3.0 does not
# have) so the upgrade has to replace it.
UPGRADE=1
disown_crd
kubectl patch crd "$CRD" --type=json -p '[{"op":"replace","path":"/spec/versions/0/schema/openAPIV3Schema/description","value":"chart-test: as chart 0.2.0 left it"}]' >/dev/null
kubectl create namespace "$UNS" >/dev/null
out=$(helm install "$UREL" "$OLD_CHART" -n "$UNS" "${SET_IDS[@]}" --set clusterLink.credentialsNamespace="$UCREDS" 2>&1) \
  || fail "helm install of chart 0.2.0: $out"
v=$(helm list -n "$UNS" -o json | jq -r --arg r "$UREL" '.[] | select(.name == $r) | "\(.chart) \(.status)"')
[[ $v == "bnerd-vpn-operator-0.2.0 deployed" ]] || fail "0.2.0 release: '$v'"
pass "helm install chart 0.2.0 ($OLD_CHART)"
kubectl apply -f - >/dev/null <<YAML || fail "create ClusterLink $ULINK"
apiVersion: ipsec.bnerd.net/v1alpha1
kind: ClusterLink
metadata:
  name: $ULINK
spec:
  serviceClusterRouter: chart-test-router
  serviceClusterCIDR: 10.199.0.0/16
YAML
LINK_UID=$(kubectl get clusterlink "$ULINK" -o jsonpath='{.metadata.uid}')
kubectl create secret generic chart-test-clouds -n "$UNS" --from-literal=clouds.yaml='clouds: {}' >/dev/null
# The users' command: their values again, new defaults underneath, plus the new required one.
upgrade() {
  helm upgrade "$UREL" "$CHART" -n "$UNS" --reset-then-reuse-values --set openstack.cloudsSecret=chart-test-clouds "$@" 2>&1
}
if out=$(upgrade); then fail "helm upgrade adopted the CRD without the adoption step"; fi
grep -q "CustomResourceDefinition \"$CRD\" .* exists and cannot be imported into the current release: invalid ownership metadata" <<<"$out" \
  || fail "helm upgrade without adoption failed otherwise: $out"
pass "helm upgrade without the adoption step is refused by Helm (the CRD from crds/ is not the release's)"
# The one-time adoption step (charts/bnerd-vpn-operator/README.md, "Upgrading from 0.2.0").
kubectl label crd "$CRD" app.kubernetes.io/managed-by=Helm >/dev/null
kubectl annotate crd "$CRD" meta.helm.sh/release-name="$UREL" meta.helm.sh/release-namespace="$UNS" >/dev/null
out=$(upgrade) || fail "helm upgrade after the adoption step: $out"
v=$(helm list -n "$UNS" -o json | jq -r --arg r "$UREL" '.[] | select(.name == $r) | "\(.chart) \(.status) \(.revision)"')
[[ $v == "bnerd-vpn-operator-$VERSION deployed "* ]] || fail "upgraded release: '$v'"
pass "helm upgrade 0.2.0 -> $VERSION after adopting the CRD ($v)"
crd_json() { kubectl get crd "$CRD" -o json; }
v=$(crd_json | jq -c '[.metadata.labels["helm.sh/chart"], .metadata.labels["app.kubernetes.io/managed-by"], .metadata.annotations["helm.sh/resource-policy"], .metadata.annotations["meta.helm.sh/release-name"]]')
[[ $v == '["bnerd-vpn-operator-'"$VERSION"'","Helm","keep","'"$UREL"'"]' ]] || fail "CRD after the upgrade: $v"
pass "the CRD is the release's now (helm.sh/chart=bnerd-vpn-operator-$VERSION, resource-policy keep)"
diff <(crd_json | jq -S '.spec.versions') <(yq -S '.spec.versions' "$CRD_FILE") >"$TMP/crd.diff" \
  || fail "the CRD on the server is not $CRD_FILE after the upgrade: $(head -20 "$TMP/crd.diff")"
pass "helm upgrade replaced the CRD's versions/schema with $CRD_FILE (the 0.2.0 text is gone)"
[[ $(kubectl get clusterlink "$ULINK" -o jsonpath='{.metadata.uid}') == "$LINK_UID" ]] || fail "ClusterLink $ULINK did not survive the upgrade"
pass "ClusterLink $ULINK survived the upgrade (same UID)"
deploy_shape() {
  kubectl get deploy -n "$UNS" "$UREL-bnerd-vpn-operator" -o json | jq -c '[.spec.replicas, .spec.strategy.type, (.spec.template.spec.containers[0].env[] | select(.name == "IPSEC_LEASE_NAME") | .value)]'
}
# 0.2.0's pods do not elect: a rolling update would run them beside the new leader, two
# writers on the same links. This one rollout is a Recreate; the next is rolling again.
v=$(deploy_shape)
[[ $v == '[2,"Recreate","'"$UREL"'-bnerd-vpn-operator"]' ]] || fail "Deployment upgraded from 0.2.0: $v"
pass "the upgrade from 0.2.0 (pods without leader election) rolls out as Recreate: never two writers"
out=$(upgrade) || fail "helm upgrade of $VERSION to itself: $out"
v=$(deploy_shape)
[[ $v == '[2,"RollingUpdate","'"$UREL"'-bnerd-vpn-operator"]' ]] || fail "upgraded Deployment: $v"
pass "the next upgrade (old pods elect) rolls out as RollingUpdate"
kubectl get -n "$UNS" pdb/"$UREL-bnerd-vpn-operator" service/"$UREL-bnerd-vpn-operator-metrics" >/dev/null \
  || fail "the upgrade did not create the PDB and the metrics Service"
v=$(kubectl get role -n "$UNS" "$UREL-bnerd-vpn-operator-leases" -o json | jq -c '[.rules[] | [.resourceNames, .verbs]]')
[[ $v == '[[["'"$UREL"'-bnerd-vpn-operator"],["get","patch"]],[null,["create"]]]' ]] || fail "lease Role rules after the upgrade: $v"
v=$(kubectl get clusterrole "$UREL-bnerd-vpn-operator" -o json | jq -c '[.rules[].resources[]] | any(. == "events")')
[[ $v == false ]] || fail "ClusterRole still grants Events after the upgrade"
kubectl get -n default role/"$UREL-bnerd-vpn-operator-events" >/dev/null && kubectl get clusterrole/"$UREL-bnerd-vpn-operator-gateway-events" >/dev/null \
  || fail "the upgrade did not create the Events Roles"
v=$(kubectl get clusterrole "$UREL-bnerd-vpn-operator" -o json | jq -c '[.rules[] | select(.resources == ["clusterlinks"]) | .verbs[]]')
[[ $v == '["list","watch","patch"]' ]] || fail "ClusterRole clusterlinks verbs after the upgrade: $v"
pass "upgraded objects: Deployment 2 replicas RollingUpdate, PDB, metrics Service, trimmed RBAC"

out=$(helm rollback "$UREL" 1 -n "$UNS" 2>&1) || fail "helm rollback to 0.2.0: $out"
v=$(helm list -n "$UNS" -o json | jq -r --arg r "$UREL" '.[] | select(.name == $r) | "\(.chart) \(.status)"')
[[ $v == "bnerd-vpn-operator-0.2.0 deployed" ]] || fail "after rollback: '$v'"
kubectl get crd "$CRD" >/dev/null 2>&1 || fail "helm rollback deleted the CRD"
[[ $(kubectl get clusterlink "$ULINK" -o jsonpath='{.metadata.uid}') == "$LINK_UID" ]] || fail "helm rollback lost ClusterLink $ULINK"
pass "helm rollback to 0.2.0 keeps the CRD and the link (resource-policy keep)"
out=$(upgrade) || fail "helm upgrade again after the rollback: $out"
pass "helm upgrade to $VERSION again after the rollback (no second adoption needed)"
# The lab's deployment and replicaset controllers made the Deployment's ReplicaSets and
# their Pods (Pending: no scheduler); they name their owners in ownerReferences, so the
# garbage collector must remove them once helm uninstall deletes the Deployment.
DEP_UID=$(kubectl get deploy -n "$UNS" "$UREL-bnerd-vpn-operator" -o jsonpath='{.metadata.uid}')
# owned <kind> <uid...>: UIDs of the <kind>s in $UNS that an object with one of these UIDs owns
owned() {
  local kind=$1; shift
  kubectl get "$kind" -n "$UNS" -o json \
    | jq -r --args '.items[] | select(any(.metadata.ownerReferences[]?.uid; IN($ARGS.positional[]))) | .metadata.uid' "$@"
}
RS_UIDS=() POD_UIDS=()
for i in $(seq 300); do
  RS_UIDS=($(owned replicasets "$DEP_UID"))
  ((${#RS_UIDS[@]} > 0)) && POD_UIDS=($(owned pods "${RS_UIDS[@]}")) && ((${#POD_UIDS[@]} > 0)) && break
  sleep 0.2
done
((${#RS_UIDS[@]} > 0 && ${#POD_UIDS[@]} > 0)) \
  || fail "the Deployment $UREL-bnerd-vpn-operator has ${#RS_UIDS[@]} ReplicaSets and ${#POD_UIDS[@]} Pods after 60 s (is kube-controller-manager running? see $(dirname "$KUBECONFIG")/kcm.log)"
out=$(helm uninstall "$UREL" -n "$UNS" 2>&1) || fail "helm uninstall: $out"
for i in $(seq 300); do
  left=$( { owned replicasets "$DEP_UID"; owned pods "${RS_UIDS[@]}"; } | wc -l)
  ((left == 0)) && break
  sleep 0.2
done
((left == 0)) || fail "60 s after helm uninstall, $left ReplicaSets/Pods of the deleted Deployment are left (garbage collector)"
pass "helm uninstall: the garbage collector removed the Deployment's ${#RS_UIDS[@]} ReplicaSets and their ${#POD_UIDS[@]} Pods (ownerReferences)"
grep -q "kept due to the resource policy" <<<"$out" && grep -q "\[CustomResourceDefinition\] $CRD" <<<"$out" \
  || fail "helm uninstall did not report keeping the CRD: $out"
kubectl get crd "$CRD" >/dev/null 2>&1 || fail "helm uninstall deleted the CRD"
[[ $(kubectl get clusterlink "$ULINK" -o jsonpath='{.metadata.uid}') == "$LINK_UID" ]] || fail "helm uninstall lost ClusterLink $ULINK"
kubectl get ns "$UCREDS" >/dev/null 2>&1 || fail "helm uninstall deleted the credentials namespace"
pass "helm uninstall keeps the CRD, the link and the credentials namespace"
# A new release after the uninstall: the kept CRD still names the old one.
install2() {
  helm install "$UREL2" "$CHART" -n "$UNS" "${SET_REQ[@]}" --set clusterLink.credentialsNamespace="$UCREDS" \
    --set clusterLink.createCredentialsNamespace=false "$@" 2>&1
}
if out=$(install2); then fail "helm install over the kept CRD of another release succeeded without --take-ownership"; fi
grep -q "annotation validation error: key \"meta.helm.sh/release-name\" must equal \"$UREL2\": current value is \"$UREL\"" <<<"$out" \
  || fail "helm install over the kept CRD failed otherwise: $out"
out=$(install2 --take-ownership) || fail "helm install --take-ownership: $out"
[[ $(crd_json | jq -r '.metadata.annotations["meta.helm.sh/release-name"]') == "$UREL2" ]] || fail "--take-ownership did not move the CRD to $UREL2"
[[ $(kubectl get clusterlink "$ULINK" -o jsonpath='{.metadata.uid}') == "$LINK_UID" ]] || fail "reinstall lost ClusterLink $ULINK"
pass "a new release takes the kept CRD over with helm install --take-ownership (the link stays)"
out=$(helm uninstall "$UREL2" -n "$UNS" 2>&1) || fail "helm uninstall $UREL2: $out"
kubectl get crd "$CRD" >/dev/null 2>&1 || fail "helm uninstall of $UREL2 deleted the CRD"
pass "helm uninstall $UREL2 keeps the CRD"

# --- (8) helm upgrade from chart 0.3.0 ---------------------------------------------------
# 0.3.0 already owns the CRD (a template) and elects a leader. The user's values file is one
# written for 0.3.0: its own defaults (`helm show values`, the gateway images included) with
# the required values and a gateway image pinned, as estates did.
V3=$TMP/values-0.3.0.yaml
helm show values "$OLD3_CHART" >"$V3" || fail "helm show values $OLD3_CHART"
yq -y -i --arg r "$ROUTER" --arg t "$TRANSIT" --arg c "$UCREDS" \
  '.openstack.routerID = $r | .openstack.transitNetworkID = $t | .openstack.cloudsSecret = "chart-test-clouds"
   | .clusterLink.credentialsNamespace = $c | .clusterLink.createCredentialsNamespace = false
   | .images.gateway.tag = "0.3.1"' "$V3"
grep -q 'gatewayWireguard' "$V3" || fail "chart 0.3.0's values lack the gateway images: is $OLD3_CHART chart 0.3.0?"
# The CRD is kept from the release above; a new release takes it over (see above).
out=$(helm install "$UREL3" "$OLD3_CHART" -n "$UNS" -f "$V3" --take-ownership 2>&1) \
  || fail "helm install of chart 0.3.0: $out"
v=$(helm list -n "$UNS" -o json | jq -r --arg r "$UREL3" '.[] | select(.name == $r) | "\(.chart) \(.status)"')
[[ $v == "bnerd-vpn-operator-0.3.0 deployed" ]] || fail "0.3.0 release: '$v'"
dep3() { kubectl get deploy -n "$UNS" "$UREL3-bnerd-vpn-operator" -o json; }
v=$(dep3 | jq -r '.spec.template.spec.containers[0] | [.image, (.env[] | select(.name == "IPSEC_GATEWAY_IMAGE") | .value)] | join(" ")')
[[ $v == "ghcr.io/bnerd/bnerd-vpn-operator:0.3.0 ghcr.io/bnerd/bnerd-vpn-gateway:0.3.1" ]] || fail "0.3.0 Deployment: $v"
pass "helm install chart 0.3.0 ($OLD3_CHART) with a 0.3.0 values file (operator :0.3.0, gateway image pinned :0.3.1)"
# A cross-tenant link whose customerProjectID 0.3.0's CRD admitted and 0.5.0's does not.
kubectl apply -f - >/dev/null <<YAML || fail "create ClusterLink $ULEGACY under 0.3.0's CRD"
apiVersion: ipsec.bnerd.net/v1alpha1
kind: ClusterLink
metadata:
  name: $ULEGACY
spec:
  serviceClusterRouter: chart-test-router
  serviceClusterCIDR: 10.198.0.0/16
  credentialsSecretRef: {name: clusterlink-$ULEGACY, namespace: $UCREDS}
  customerProjectID: legacy-project
YAML
LEGACY_UID=$(kubectl get clusterlink "$ULEGACY" -o jsonpath='{.metadata.uid}')
pass "0.3.0's CRD admits customerProjectID 'legacy-project' (ClusterLink $ULEGACY)"

out=$(helm upgrade "$UREL3" "$CHART" -n "$UNS" --reset-then-reuse-values 2>&1) \
  || fail "helm upgrade 0.3.0 -> $VERSION with --reset-then-reuse-values: $out"
v=$(helm list -n "$UNS" -o json | jq -r --arg r "$UREL3" '.[] | select(.name == $r) | "\(.chart) \(.status) \(.revision)"')
[[ $v == "bnerd-vpn-operator-$VERSION deployed 2" ]] || fail "release upgraded from 0.3.0: '$v'"
pass "helm upgrade 0.3.0 -> $VERSION, no adoption step ($v)"
diff <(crd_json | jq -S '.spec.versions') <(yq -S '.spec.versions' "$CRD_FILE") >"$TMP/crd.diff" \
  || fail "the CRD after the upgrade from 0.3.0 is not $CRD_FILE: $(head -20 "$TMP/crd.diff")"
v=$(crd_json | jq -c '[.metadata.labels["helm.sh/chart"], .metadata.annotations["meta.helm.sh/release-name"], .metadata.annotations["helm.sh/resource-policy"]]')
[[ $v == '["bnerd-vpn-operator-'"$VERSION"'","'"$UREL3"'","keep"]' ]] || fail "CRD after the upgrade from 0.3.0: $v"
pass "the CRD is $CRD_FILE, the release's, resource-policy keep"
v=$(dep3 | jq -c '[.spec.strategy.type, .spec.template.spec.containers[0].image, [.spec.template.spec.containers[0].env[].name | select(test("IMAGE"))]]')
[[ $v == '["RollingUpdate","ghcr.io/bnerd/bnerd-vpn-operator:'"$VERSION"'",[]]' ]] || fail "Deployment upgraded from 0.3.0: $v"
pass "0.3.0's pods elect, so the upgrade rolls (RollingUpdate); operator :$VERSION, no gateway image env"
# 0.3.0 admitted any service CIDR: the upgraded operator is given no bounds, so a link with a
# public CIDR keeps converging (crates/operator/tests/e2e.rs runs the binary on these defaults).
# (the apiserver drops an env var's empty value: read it back as "")
v=$(dep3 | jq -c '[.spec.template.spec.containers[0].env[] | select(.name | test("^IPSEC_(SERVICE|GATEWAY)_CIDR")) | .value // ""]')
[[ $v == '["","0","","0"]' ]] || fail "CIDR bounds after the upgrade from 0.3.0 (service ranges, prefix, gateway ranges, prefix): $v"
pass "the upgrade from 0.3.0 sets no CIDR bounds (links 0.3.0 admitted, public CIDRs too, keep converging)"
[[ $(helm get values "$UREL3" -n "$UNS" -o json | jq -r '.images.gateway.tag') == 0.3.1 ]] \
  || fail "the user's images.gateway.tag is not among the release's values any more"
out=$(helm upgrade "$UREL3" "$CHART" -n "$UNS" -f "$V3" 2>&1) || fail "helm upgrade -f (the 0.3.0 values file): $out"
pass "the 0.3.0 values file (gateway images and all) upgrades unchanged, with --reset-then-reuse-values and with -f"

# The new rule, on the real apiserver; and the old link is not wedged (ratcheting).
new_cross() { # new_cross <customerProjectID>: a server-side dry run of a new cross-tenant link
  kubectl create --dry-run=server -o name -f - 2>&1 <<YAML
apiVersion: ipsec.bnerd.net/v1alpha1
kind: ClusterLink
metadata:
  name: chart-test-upgrade-new
spec:
  serviceClusterRouter: chart-test-router
  serviceClusterCIDR: 10.197.0.0/16
  credentialsSecretRef: {name: clusterlink-chart-test-upgrade-new, namespace: $UCREDS}
  customerProjectID: "$1"
YAML
}
if out=$(new_cross legacy-project); then fail "the upgraded CRD admits customerProjectID 'legacy-project': $out"; fi
grep -q "customerProjectID must be a Keystone project ID: 32 lowercase hex digits, or a UUID with dashes" <<<"$out" \
  || fail "a new link with customerProjectID 'legacy-project' was refused otherwise: $out"
out=$(new_cross 0123456789abcdef0123456789abcdef) || fail "the upgraded CRD refuses a 32-hex project ID: $out"
out=$(new_cross c0ffee00-1111-4222-8333-444455556666) || fail "the upgraded CRD refuses a UUID project ID: $out"
pass "after the upgrade a new link needs a Keystone project ID (refused: 'customerProjectID must be a Keystone project ID ...')"
out=$(kubectl label clusterlink "$ULEGACY" chart-test/touched=yes 2>&1) || fail "labelling $ULEGACY after the upgrade is refused: $out"
# accepted, with the apiserver's warning naming the field
grep -q 'Warning: spec.customerProjectID: Invalid value: "legacy-project": customerProjectID must be a Keystone project ID' <<<"$out" \
  || fail "labelling $ULEGACY: no warning about its customerProjectID: $out"
out=$(kubectl patch clusterlink "$ULEGACY" --subresource=status --type=merge \
  -p '{"status":{"observedGeneration":1}}' 2>&1) || fail "a status patch of $ULEGACY after the upgrade is refused: $out"
[[ $(kubectl get clusterlink "$ULEGACY" -o jsonpath='{.metadata.uid} {.spec.customerProjectID} {.status.observedGeneration}') == "$LEGACY_UID legacy-project 1" ]] \
  || fail "ClusterLink $ULEGACY after the upgrade: $(kubectl get clusterlink "$ULEGACY" -o json | jq -c '[.metadata.uid, .spec, .status]')"
[[ $(kubectl get clusterlink "$ULINK" -o jsonpath='{.metadata.uid}') == "$LINK_UID" ]] || fail "ClusterLink $ULINK did not survive the upgrade from 0.3.0"
pass "links from before the upgrade survive; $ULEGACY (old project ID) still takes label and status writes (ratcheting, with a warning)"

out=$(helm rollback "$UREL3" 1 -n "$UNS" 2>&1) || fail "helm rollback to 0.3.0: $out"
v=$(helm list -n "$UNS" -o json | jq -r --arg r "$UREL3" '.[] | select(.name == $r) | "\(.chart) \(.status)"')
[[ $v == "bnerd-vpn-operator-0.3.0 deployed" ]] || fail "after the rollback to 0.3.0: '$v'"
[[ $(dep3 | jq -r '.spec.template.spec.containers[0].image') == ghcr.io/bnerd/bnerd-vpn-operator:0.3.0 ]] \
  || fail "the rollback did not bring the 0.3.0 operator back"
[[ $(kubectl get clusterlink "$ULEGACY" -o jsonpath='{.metadata.uid}') == "$LEGACY_UID" ]] || fail "helm rollback lost ClusterLink $ULEGACY"
out=$(helm upgrade "$UREL3" "$CHART" -n "$UNS" --reset-then-reuse-values 2>&1) || fail "helm upgrade again after the rollback: $out"
pass "helm rollback to 0.3.0 and upgrade to $VERSION again keep the CRD and the links"
out=$(helm uninstall "$UREL3" -n "$UNS" 2>&1) || fail "helm uninstall $UREL3: $out"
kubectl get crd "$CRD" >/dev/null 2>&1 || fail "helm uninstall of $UREL3 deleted the CRD"
pass "helm uninstall $UREL3 keeps the CRD"

echo "chart-test: $PASSED passed, 0 failed ($(elapsed) s, before cleanup)"
