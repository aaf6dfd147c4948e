#!/usr/bin/env bash
# Brings up real Keystone + Neutron and a real kube-apiserver on loopback, installs the
# CRD, runs the operator, applies the spec's own example ClusterLink and shows it Ready.
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/bnerd-vpn-operator/target}
echo "== starting the OpenStack lab (first run on a fresh machine: ~2 min)"
LAB_ENV=$(bash lab/openstack/up.sh)
set -a; . "$LAB_ENV"; set +a
echo "== starting kube-apiserver (first run builds it from Go modules: ~5 min)"
export KUBECONFIG=$(bash lab/kube/up.sh | tail -n 1)
echo "== building the operator"
cargo build -q -p bnerd-vpn-operator
kubectl apply --server-side -f charts/bnerd-vpn-operator/files/clusterlinks.ipsec.bnerd.net.yaml >/dev/null
kubectl wait --for=condition=Established crd/clusterlinks.ipsec.bnerd.net --timeout=30s >/dev/null
LOG=$(mktemp /tmp/bnerd-vpn-operator.XXXX.log)
OS_CLOUD=lab-operator OS_CLIENT_CONFIG_FILE=$LAB_CLOUDS_YAML \
IPSEC_GATEWAY_ROUTER_ID=$LAB_GATEWAY_ROUTER_ID IPSEC_TRANSIT_NETWORK_ID=$LAB_TRANSIT_NETWORK_ID \
IPSEC_LEASE_NAME=bnerd-vpn-operator-demo IPSEC_METRICS_ADDR=127.0.0.1:0 \
  "$CARGO_TARGET_DIR/debug/bnerd-vpn-operator" >"$LOG" 2>&1 &
OP=$!
trap 'kill $OP 2>/dev/null || true' EXIT
echo "== operator running (pid $OP, log $LOG); applying svc01-link"
kubectl apply -f - <<YAML
apiVersion: ipsec.bnerd.net/v1alpha1
kind: ClusterLink
metadata:
  name: svc01-link
spec:
  serviceClusterRouter: shoot--services--svc01
  serviceClusterCIDR: 10.251.0.0/16
YAML
kubectl wait --for=condition=Ready clusterlink/svc01-link --timeout=60s >/dev/null
kubectl get clusterlinks
echo
kubectl get clusterlink svc01-link -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}): {.message}{"\n"}{end}'
echo
echo "== the route on the gateway router ($LAB_GATEWAY_ROUTER_NAME):"
"$(cat "$LAB_DIR/run/venv.path" 2>/dev/null || echo "$HOME/.cache/bnerd-vpn-operator/oslab-venv-b9bea594946f")/bin/openstack" --os-cloud lab-operator router show "$LAB_GATEWAY_ROUTER_ID" -c routes -f value 2>/dev/null || true
if [ "${KEEP:-0}" != 1 ]; then
  echo "== deleting the link (the finalizer unwinds route, attachment, port); KEEP=1 keeps it"
  kubectl delete clusterlink svc01-link --timeout=60s
fi
