#!/usr/bin/env bash
# Checks the Helm chart charts/bnerd-vpn-operator against the local kubelab apiserver:
# lint, required values, image tag defaults, a real server-side apply, and the
# operator's RBAC (Secrets readable ONLY in the credentials namespace).
#
# Usage: lab/kube/chart-test.sh
# Env:   CHART_TEST_KEEP=1  leave the applied objects in place (for debugging)
#
# kubelab runs no controllers: the Deployment never gets pods, which is fine here.
# It also has no namespace controller, so deleted namespaces would stay Terminating;
# the cleanup finalizes the (emptied) test namespaces itself. The CRDs are applied
# but NOT deleted at the end, because other tests share this apiserver and deleting
# a CRD deletes all its objects.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
CHART=charts/bnerd-vpn-operator
REL=chart-test
NS=chart-test-bnerd-vpn                # release namespace (created by this script)
CREDS_NS=chart-test-bnerd-vpn-creds    # credentials namespace (created by the chart)
SA=chart-test-bnerd-vpn-operator       # <release>-<chart>, see _helpers.tpl
SA_USER=system:serviceaccount:$NS:$SA
SET_IDS=(--set openstack.routerID=11111111-2222-3333-4444-555555555555
         --set openstack.transitNetworkID=66666666-7777-8888-9999-000000000000)

T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

eval "$(lab/kube/build.sh)"
KUBECONFIG=$(lab/kube/up.sh | tail -1)
export KUBECONFIG
helm() { "$HELM_BIN" "$@"; }

PASSED=0
pass() { PASSED=$((PASSED + 1)); echo "ok   $PASSED: $*"; }
fail() { echo "FAIL: $*" >&2; echo "chart-test: $PASSED passed, 1 failed ($(elapsed) s)" >&2; exit 1; }

TMP=$(mktemp -d)
RENDERED=$TMP/rendered.yaml
APPLIED=0

# finalize_ns <ns>: a deleted namespace stays Terminating without the namespace
# controller; once its objects are gone, clear spec.finalizers like that controller does.
finalize_ns() {
  local ns=$1 i
  kubectl get ns "$ns" >/dev/null 2>&1 || return 0
  kubectl delete ns "$ns" --wait=false --ignore-not-found >/dev/null
  kubectl get ns "$ns" -o json \
    | sed 's/"kubernetes"//' \
    | kubectl replace --raw "/api/v1/namespaces/$ns/finalize" -f - >/dev/null
  for i in $(seq 50); do kubectl get ns "$ns" >/dev/null 2>&1 || return 0; sleep 0.1; done
  echo "chart-test: namespace $ns still present after finalize" >&2
  return 1
}

cleanup() {
  local rc=$?
  if [[ ${CHART_TEST_KEEP:-0} == 1 ]]; then
    echo "chart-test: CHART_TEST_KEEP=1, leaving objects (rendered manifests: $RENDERED)" >&2
    return "$rc"
  fi
  if [[ $APPLIED == 1 ]]; then
    kubectl delete -f "$RENDERED" --ignore-not-found --wait=false >/dev/null || rc=1
    kubectl delete secret -n "$CREDS_NS" chart-test-creds --ignore-not-found --wait=false >/dev/null 2>&1 || true
    finalize_ns "$CREDS_NS" || rc=1
    finalize_ns "$NS" || rc=1
    # cluster-scoped RBAC must be gone
    if kubectl get clusterrole,clusterrolebinding "$SA" >/dev/null 2>&1; then
      echo "chart-test: cleanup left cluster RBAC $SA behind" >&2; rc=1
    fi
  fi
  rm -rf "$TMP"
  return "$rc"
}
trap cleanup EXIT

# Leftovers of an earlier interrupted run (e.g. a Terminating namespace) would break apply.
for ns in "$CREDS_NS" "$NS"; do
  if kubectl get ns "$ns" >/dev/null 2>&1; then
    echo "chart-test: removing leftover namespace $ns" >&2
    helm template "$REL" "$CHART" -n "$NS" "${SET_IDS[@]}" \
      --set clusterLink.credentialsNamespace="$CREDS_NS" \
      | kubectl delete -f - --ignore-not-found --wait=false >/dev/null 2>&1 || true
    kubectl delete secret -n "$CREDS_NS" chart-test-creds --ignore-not-found >/dev/null 2>&1 || true
    finalize_ns "$ns"
  fi
done

# --- (1) lint -----------------------------------------------------------------
out=$(helm lint --strict "$CHART" "${SET_IDS[@]}" 2>&1) || fail "helm lint --strict: $out"
pass "helm lint --strict"

# --- (2) required values --------------------------------------------------------
if out=$(helm template "$REL" "$CHART" 2>&1); then fail "helm template without openstack.routerID succeeded"; fi
grep -q 'openstack.routerID is required' <<<"$out" \
  || fail "missing openstack.routerID: error does not name it: $out"
pass "helm template fails naming openstack.routerID when unset"

if out=$(helm template "$REL" "$CHART" --set openstack.routerID=r 2>&1); then
  fail "helm template without openstack.transitNetworkID succeeded"
fi
grep -q 'openstack.transitNetworkID is required' <<<"$out" \
  || fail "missing openstack.transitNetworkID: error does not name it: $out"
pass "helm template fails naming openstack.transitNetworkID when unset"

# --- (3) render + image tags ------------------------------------------------------
helm template "$REL" "$CHART" -n "$NS" "${SET_IDS[@]}" \
  --set clusterLink.credentialsNamespace="$CREDS_NS" \
  --set openstack.cloudsSecret=chart-test-clouds >"$RENDERED"

# env_value <file> <NAME>: the value line right after "- name: NAME"
env_value() { grep -A1 -E "^\s+- name: $2\$" "$1" | sed -n 's/^\s*value: //p' | tr -d '"'; }

img=$(sed -n 's/^\s*image: //p' "$RENDERED" | tr -d '"')
[[ $img == ghcr.io/bnerd/bnerd-vpn-operator:0.2.0 ]] || fail "operator image is '$img', want ...:0.2.0 (AppVersion)"
pass "operator image defaults to :0.2.0 ($img)"

for e in IPSEC_GATEWAY_IMAGE IPSEC_GATEWAY_WIREGUARD_IMAGE IPSEC_STATUS_AGENT_IMAGE; do
  v=$(env_value "$RENDERED" "$e")
  [[ $v == *:0.2.0 && $v != :* ]] || fail "$e is '$v', want <repo>:0.2.0"
  pass "$e defaults to $v"
done

pinned=$TMP/pinned.yaml
helm template "$REL" "$CHART" -n "$NS" "${SET_IDS[@]}" --set images.gateway.tag=0.3.1 >"$pinned"
v=$(env_value "$pinned" IPSEC_GATEWAY_IMAGE)
[[ $v == *:0.3.1 ]] || fail "IPSEC_GATEWAY_IMAGE with images.gateway.tag=0.3.1 is '$v'"
pass "IPSEC_GATEWAY_IMAGE pinned to $v"
v=$(env_value "$pinned" IPSEC_STATUS_AGENT_IMAGE)
[[ $v == *:0.2.0 ]] || fail "pinning the gateway tag changed IPSEC_STATUS_AGENT_IMAGE to '$v'"
pass "other images stay at :0.2.0 when only the gateway tag is pinned"

for kv in IPSEC_GATEWAY_ROUTER_ID=11111111-2222-3333-4444-555555555555 \
          IPSEC_TRANSIT_NETWORK_ID=66666666-7777-8888-9999-000000000000 \
          IPSEC_RESYNC_INTERVAL=5m IPSEC_CLUSTERLINK_CREDENTIALS_NAMESPACE=$CREDS_NS \
          OS_CLOUD=openstack OS_CLIENT_CONFIG_FILE=/etc/openstack/clouds.yaml RUST_LOG=info; do
  v=$(env_value "$RENDERED" "${kv%%=*}")
  [[ $v == "${kv#*=}" ]] || fail "env ${kv%%=*} is '$v', want '${kv#*=}'"
done
pass "env IPSEC_*/OS_*/RUST_LOG values"
grep -A3 -E '^\s+- name: POD_NAME$' "$RENDERED" | grep -q 'fieldPath: metadata.name' \
  || fail "POD_NAME does not come from fieldRef metadata.name"
pass "POD_NAME from fieldRef metadata.name"
grep -q 'mountPath: /etc/openstack/clouds.yaml' "$RENDERED" && grep -q 'secretName: chart-test-clouds' "$RENDERED" \
  && grep -A2 'mountPath: /etc/openstack/clouds.yaml' "$RENDERED" | grep -q 'readOnly: true' \
  || fail "clouds.yaml Secret is not mounted read-only at /etc/openstack/clouds.yaml"
pass "clouds.yaml mounted read-only from openstack.cloudsSecret"
for want in 'runAsNonRoot: true' 'readOnlyRootFilesystem: true' 'allowPrivilegeEscalation: false' '- ALL'; do
  grep -qF -- "$want" "$RENDERED" || fail "securityContext lacks '$want'"
done
pass "securityContext: runAsNonRoot, readOnlyRootFilesystem, no privilege escalation, drop ALL"
awk '/^kind: ClusterRole$/{c=1;next} /^---/{c=0} c' "$RENDERED" | grep -q secrets \
  && fail "the ClusterRole mentions secrets"
pass "no Secrets in the ClusterRole"
[[ $(grep -c '^kind: Namespace$' "$RENDERED") == 1 ]] || fail "want exactly one Namespace (credentials) in the render"
n=$(helm template "$REL" "$CHART" "${SET_IDS[@]}" --set clusterLink.createCredentialsNamespace=false | grep -c '^kind: Namespace$' || true)
[[ $n == 0 ]] || fail "createCredentialsNamespace=false still renders a Namespace"
pass "credentials Namespace rendered only when createCredentialsNamespace=true"
grep -A1 -E '^\s+strategy:$' "$RENDERED" | grep -q 'type: Recreate' \
  || fail "the Deployment does not use strategy Recreate (two operators would overlap during an upgrade)"
pass "Deployment strategy Recreate"
if out=$(helm template "$REL" "$CHART" "${SET_IDS[@]}" --set replicaCount=2 2>&1); then
  fail "replicaCount=2 rendered; without leader election it must be refused"
fi
grep -q "replicaCount > 1 is refused" <<<"$out" || fail "replicaCount=2: error does not say why: $out"
pass "replicaCount > 1 refused at install (no leader election yet)"

# --- (4) real server-side apply ---------------------------------------------------
shopt -s nullglob
crds=("$CHART"/crds/*.yaml)
if ((${#crds[@]})); then
  for f in "${crds[@]}"; do
    kubectl apply --server-side --force-conflicts --field-manager=chart-test -f "$f" >/dev/null \
      || fail "apply CRD $f"
  done
  kubectl wait --for condition=established --timeout=30s -f "$CHART/crds/" >/dev/null \
    || fail "CRDs not Established"
  pass "CRDs applied and Established (${#crds[@]} file(s))"
else
  echo "chart-test: no CRDs in $CHART/crds, skipping" >&2
fi

kubectl create namespace "$NS" >/dev/null || fail "create namespace $NS"
APPLIED=1
out=$(kubectl apply --server-side --field-manager=chart-test -f "$RENDERED" 2>&1) \
  || fail "server-side apply of the rendered chart: $out"
pass "server-side apply ($(grep -c . <<<"$out") objects)"
kubectl get -n "$NS" deployment/"$SA" serviceaccount/"$SA" role/"$SA"-leases >/dev/null \
  && kubectl get -n "$CREDS_NS" role/"$SA"-credentials rolebinding/"$SA"-credentials >/dev/null \
  && kubectl get clusterrole/"$SA" clusterrolebinding/"$SA" >/dev/null \
  || fail "applied objects not found"
pass "Deployment, ServiceAccount, Roles, ClusterRole(Binding) exist"

# --- (5) RBAC -------------------------------------------------------------------
# can <yes|no> <verb> <resource> [kubectl flags...]
can() {
  local want=$1; shift
  local got
  got=$(kubectl auth can-i "$@" --as="$SA_USER" 2>/dev/null || true)
  [[ $got == "$want" ]] || fail "can-i $* as $SA_USER: got '$got', want '$want'"
  pass "can-i $* -> $want"
}
can yes get secrets -n "$CREDS_NS"
can yes list secrets -n "$CREDS_NS"
can yes watch secrets -n "$CREDS_NS"
can no create secrets -n "$CREDS_NS"
can no get secrets -n default
can no get secrets -n kube-system
can no list secrets -A
can yes patch clusterlinks.ipsec.bnerd.net --subresource=status
can yes update clusterlinks.ipsec.bnerd.net --subresource=finalizers
can yes watch clusterlinks.ipsec.bnerd.net
can no delete clusterlinks.ipsec.bnerd.net
can yes create events.events.k8s.io -n default
can yes update leases.coordination.k8s.io -n "$NS"
can no update leases.coordination.k8s.io -n default

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
expect_sar true list ipsec.bnerd.net ipsecgateways ""
expect_sar true watch ipsec.bnerd.net vpngateways ""
expect_sar false patch ipsec.bnerd.net vpngateways ""

# And real reads while impersonating the ServiceAccount.
kubectl create secret generic chart-test-creds -n "$CREDS_NS" --from-literal=k=v >/dev/null
kubectl get secret chart-test-creds -n "$CREDS_NS" --as="$SA_USER" >/dev/null 2>&1 \
  || fail "ServiceAccount cannot read a Secret in $CREDS_NS"
pass "impersonated GET of a Secret in $CREDS_NS succeeds"
if out=$(kubectl get secrets -n kube-system --as="$SA_USER" 2>&1); then
  fail "ServiceAccount can list Secrets in kube-system"
fi
grep -q Forbidden <<<"$out" || fail "listing kube-system Secrets failed, but not with Forbidden: $out"
pass "impersonated LIST of Secrets in kube-system is Forbidden"

echo "chart-test: $PASSED passed, 0 failed ($(elapsed) s, before cleanup)"
