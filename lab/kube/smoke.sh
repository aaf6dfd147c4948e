#!/usr/bin/env bash
# Smoke test against a running kubelab (start it with up.sh first):
# namespaces, a CRD with a CEL validation rule (valid object accepted, invalid
# rejected), RBAC via `kubectl auth can-i` for admin and operator-test, and the
# kube-controller-manager beside it: the serviceaccount and root-CA publisher
# controllers fill a new namespace, the garbage collector deletes a dependent
# (ownerReferences), and the namespace controller removes a deleted namespace.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KLAB=${KLAB:-$HOME/.cache/bnerd-vpn-operator/kubelab-run}
KUBECTL=${KUBECTL:-kubectl}
A=(--kubeconfig "$KLAB/kubeconfig")
O=(--kubeconfig "$KLAB/kubeconfig-operator-test")
fail() { echo "smoke.sh: FAIL: $*" >&2; exit 1; }

"$KUBECTL" "${A[@]}" version
"$KUBECTL" "${A[@]}" get ns
"$KUBECTL" "${A[@]}" apply -f "$HERE/testdata/cel-crd.yaml"
"$KUBECTL" "${A[@]}" wait --for=condition=Established --timeout=60s crd/widgets.lab.bnerd.net
"$KUBECTL" "${A[@]}" create ns smoke --dry-run=client -o yaml | "$KUBECTL" "${A[@]}" apply -f -

good='{"apiVersion":"lab.bnerd.net/v1","kind":"Widget","metadata":{"name":"good","namespace":"smoke"},"spec":{"min":1,"max":3}}'
bad='{"apiVersion":"lab.bnerd.net/v1","kind":"Widget","metadata":{"name":"bad","namespace":"smoke"},"spec":{"min":5,"max":3}}'
echo "$good" | "$KUBECTL" "${A[@]}" apply -f -
if out=$(echo "$bad" | "$KUBECTL" "${A[@]}" apply -f - 2>&1); then
  fail "invalid Widget was accepted: $out"
fi
echo "$out"
grep -q "min must be <= max" <<<"$out" || fail "rejection did not come from the CEL rule: $out"
echo "OK: CEL rule rejected the invalid object"

[[ $("$KUBECTL" "${A[@]}" auth can-i '*' '*' --all-namespaces) == yes ]] || fail "admin cannot do everything"
"$KUBECTL" "${A[@]}" auth whoami
"$KUBECTL" "${O[@]}" auth whoami
r=$("$KUBECTL" "${O[@]}" auth can-i list widgets.lab.bnerd.net -n smoke || true)
[[ $r == no ]] || fail "operator-test should not be allowed to list widgets (got: $r)"
r=$("$KUBECTL" "${A[@]}" auth can-i list widgets.lab.bnerd.net -n smoke --as operator-test || true)
[[ $r == no ]] || fail "impersonated operator-test should not be allowed (got: $r)"
echo "OK: admin can-i '*' = yes; operator-test can-i list widgets = no"

# kube-controller-manager: a new namespace gets its "default" ServiceAccount and the
# kube-root-ca.crt ConfigMap.
for i in $(seq 100); do
  "$KUBECTL" "${A[@]}" get -n smoke serviceaccount/default configmap/kube-root-ca.crt >/dev/null 2>&1 && break
  sleep 0.2
done
"$KUBECTL" "${A[@]}" get -n smoke serviceaccount/default configmap/kube-root-ca.crt >/dev/null \
  || fail "namespace smoke has no default ServiceAccount / kube-root-ca.crt after 20 s (kube-controller-manager, see $KLAB/kcm.log)"
echo "OK: namespace smoke got serviceaccount/default and configmap/kube-root-ca.crt"

# Garbage collector: a ConfigMap owned by another goes when its owner is deleted.
"$KUBECTL" "${A[@]}" create configmap -n smoke gc-owner >/dev/null
owner_uid=$("$KUBECTL" "${A[@]}" get configmap -n smoke gc-owner -o jsonpath='{.metadata.uid}')
"$KUBECTL" "${A[@]}" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: gc-dependent
  namespace: smoke
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: gc-owner, uid: "$owner_uid"}]
YAML
t0=$SECONDS
"$KUBECTL" "${A[@]}" delete configmap -n smoke gc-owner --cascade=background >/dev/null
"$KUBECTL" "${A[@]}" wait --for=delete -n smoke configmap/gc-dependent --timeout=60s >/dev/null \
  || fail "configmap gc-dependent outlived its owner by 60 s (garbage collector)"
echo "OK: the garbage collector deleted gc-dependent with its owner ($((SECONDS - t0)) s)"

# Namespace controller: a deleted namespace (with a Widget and a ConfigMap in it) goes away.
t0=$SECONDS
"$KUBECTL" "${A[@]}" delete ns smoke --wait=false >/dev/null
"$KUBECTL" "${A[@]}" wait --for=delete ns/smoke --timeout=120s >/dev/null \
  || fail "namespace smoke still there 120 s after its delete: $("$KUBECTL" "${A[@]}" get ns smoke -o jsonpath='{.status}')"
echo "OK: the namespace controller removed namespace smoke ($((SECONDS - t0)) s)"

# Clean up the CRD (its finalizer runs inside the apiserver, so this completes).
"$KUBECTL" "${A[@]}" delete -f "$HERE/testdata/cel-crd.yaml" --timeout=60s >/dev/null
echo "smoke.sh: all OK"
