#!/usr/bin/env bash
# Brings up real Keystone + Neutron (ML2/OVN, with a userspace data plane) and a real
# kube-apiserver on loopback, installs the CRD, runs the operator, applies the spec's own
# example ClusterLink, shows it Ready and a packet through it: a gateway pod on the transit
# network pings a VM in 10.251.0.0/16 over the route the operator installed; then deletes the
# link and shows the path gone. Needs root (network namespaces for the two endpoints).
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
PY=$(cat "$LAB_DIR/run/venv.path")/bin/python
OSC=$(cat "$LAB_DIR/run/venv.path")/bin/openstack
OVS=(ovs-vsctl --db="$LAB_OVN_OVS_DB")

# Two endpoints on the ML2/OVN Neutron: each a Neutron port whose MAC and address a network
# namespace takes, its veth peer on br-int bound to the port (external_ids:iface-id).
attach() { # name port-id mac ip/prefix gateway
  local ns=bnl-demo-$1
  ip netns del "$ns" 2>/dev/null || true; ip link del "$ns" 2>/dev/null || true
  ip netns add "$ns"
  ip link add "$ns" type veth peer name "$ns-p"
  ip link set "$ns-p" netns "$ns"
  ip -n "$ns" link set "$ns-p" name eth0
  ip -n "$ns" link set eth0 address "$3" mtu 1442
  ip -n "$ns" addr add "$4" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "$5"
  ip link set "$ns" mtu 1442 up
  "${OVS[@]}" --may-exist add-port br-int "$ns" -- set Interface "$ns" external_ids:iface-id="$2"
}
detach() {
  for n in pod vm; do
    "${OVS[@]}" --if-exists del-port br-int "bnl-demo-$n" 2>/dev/null || true
    ip netns del "bnl-demo-$n" 2>/dev/null || true; ip link del "bnl-demo-$n" 2>/dev/null || true
  done
}
echo "== a gateway pod on vpn-transit (10.254.0.10) and a VM on svc01's network (10.251.0.5)"
while read -r name id mac cidr gw; do
  attach "$name" "$id" "$mac" "$cidr" "$gw"
  [ "$name" = pod ] && { POD_PORT=$id; POD_MAC=$mac; }
done < <("$PY" lab/openstack/demo_endpoints.py up)
ping_vm() { ip netns exec bnl-demo-pod ping -n -c 3 -i 0.2 -W 1 10.251.0.5; }
echo "== before the link: the gateway pod pings 10.251.0.5 (no route yet)"
ping_vm || true

LOG=$(mktemp /tmp/bnerd-vpn-operator.XXXX.log)
OS_CLOUD=lab-operator-ovn OS_CLIENT_CONFIG_FILE=$LAB_CLOUDS_YAML OS_REGION_NAME=$LAB_OVN_REGION \
IPSEC_GATEWAY_ROUTER_ID=$LAB_OVN_GATEWAY_ROUTER_ID IPSEC_TRANSIT_NETWORK_ID=$LAB_OVN_TRANSIT_NETWORK_ID \
IPSEC_LEASE_NAME=bnerd-vpn-operator-demo IPSEC_METRICS_ADDR=127.0.0.1:0 \
  "$CARGO_TARGET_DIR/debug/bnerd-vpn-operator" >"$LOG" 2>&1 &
OP=$!
cleanup() {
  kill $OP 2>/dev/null || true
  if [ "${KEEP:-0}" != 1 ]; then detach; "$PY" lab/openstack/demo_endpoints.py down || true; fi
}
trap cleanup EXIT
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
OS_REGION_NAME=$LAB_OVN_REGION "$OSC" --os-cloud lab-operator-ovn router show "$LAB_OVN_GATEWAY_ROUTER_ID" -c routes -f value 2>/dev/null || true
echo "== a packet through the link: the gateway pod pings 10.251.0.5, the reply comes back over the leg"
ping_vm
echo "== ovn-trace of that echo request (hop by hop: transit switch, gateway router, svc01's router, svc01's network)"
GW_MAC=$("$PY" -c 'import json,sys; print(json.load(sys.stdin)["port"]["mac_address"])' \
  < <("$PY" lab/openstack/neutron_call.py "$LAB_NEUTRON_OVN_URL" GET "/ports/$LAB_OVN_GATEWAY_ROUTER_PORT_ID"))
ovn-trace --db="$LAB_OVN_SB_DB" --minimal "neutron-$LAB_OVN_TRANSIT_NETWORK_ID" \
  "inport == \"$POD_PORT\" && eth.src == $POD_MAC && eth.dst == $GW_MAC && ip4.src == 10.254.0.10 && ip4.dst == 10.251.0.5 && ip.ttl == 64 && icmp4.type == 8 && icmp4.code == 0" \
  | grep -vE '^#|^$' || true
if [ "${KEEP:-0}" != 1 ]; then
  echo "== deleting the link (the finalizer unwinds route, attachment, port); KEEP=1 keeps it"
  kubectl delete clusterlink svc01-link --timeout=60s
  echo "== after the delete: the gateway pod pings 10.251.0.5 again (the path is gone)"
  if ping_vm; then echo "demo: the path is still there after the delete" >&2; exit 1; fi
fi
