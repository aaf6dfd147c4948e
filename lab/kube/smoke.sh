#!/usr/bin/env bash
# Smoke test against a running kubelab (start it with up.sh first):
# namespaces, a CRD with a CEL validation rule (valid object accepted, invalid
# rejected), and RBAC via `kubectl auth can-i` for admin and operator-test.
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

# Clean up the CRD (its finalizer runs inside the apiserver, so this completes).
# The namespace is kept on purpose: without kube-controller-manager there is no
# namespace controller, and a deleted namespace would stay Terminating forever.
"$KUBECTL" "${A[@]}" delete -f "$HERE/testdata/cel-crd.yaml" --timeout=60s >/dev/null
echo "smoke.sh: all OK"
