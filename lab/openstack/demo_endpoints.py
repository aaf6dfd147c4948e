#!/usr/bin/env python3
"""The demo's two endpoints on the lab's ML2/OVN Neutron (run by demo.sh with the lab venv's
python, lab.env in the environment):

    demo_endpoints.py up     svc01's service network 10.251.0.0/16 on shoot--services--svc01
                             (gateway .1), a VM port at 10.251.0.5 on it, and a gateway pod
                             port at 10.254.0.10 on vpn-transit; found by name first. Prints
                             `<name> <port id> <mac> <ip>/<prefix> <gateway>` per endpoint.
    demo_endpoints.py down   removes them again (the router interface, the ports, the network).

As the operator user (the operator's project owns all of it); port security is turned off on
the two ports as the lab's admin, so security groups do not hide what the routes do.
"""
import json
import os
import sys

import requests

KS = os.environ["OS_AUTH_URL"]
NU = os.environ["LAB_NEUTRON_OVN_URL"] + "/v2.0"
SVC_ROUTER = os.environ["LAB_OVN_SVC01_ROUTER_ID"]
TRANSIT = os.environ["LAB_OVN_TRANSIT_NETWORK_ID"]
NET, SUBNET, CIDR, GW, VM_IP, POD_IP = ("demo-svc01-net", "demo-svc01-subnet", "10.251.0.0/16",
                                        "10.251.0.1", "10.251.0.5", "10.254.0.10")


def token(user, password, project):
    body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": user, "domain": {"name": "Default"}, "password": password}}},
        "scope": {"project": {"name": project, "domain": {"name": "Default"}}}}}
    r = requests.post(KS + "/auth/tokens", json=body, timeout=30)
    r.raise_for_status()
    return r.headers["X-Subject-Token"]


def env(k):
    return os.environ[k]


OP = {"X-Auth-Token": token(env("LAB_OPERATOR_USERNAME"), env("LAB_OPERATOR_PASSWORD"),
                            env("LAB_OPERATOR_PROJECT_NAME"))}
ADMIN = {"X-Auth-Token": token(env("LAB_ADMIN_USERNAME"), env("LAB_ADMIN_PASSWORD"),
                               env("LAB_ADMIN_PROJECT_NAME"))}


def call(h, method, path, ok=(200, 201, 204), **kw):
    r = requests.request(method, NU + path, headers=h, timeout=60, **kw)
    if r.status_code not in ok:
        sys.exit(f"demo_endpoints: {method} {path}: HTTP {r.status_code} {r.text[:300]}")
    return r.json() if r.content else {}


def one(kind, **params):
    items = call(OP, "GET", f"/{kind}", params=params)[kind]
    return items[0] if items else None


def port(network_id, name, ip):
    p = one("ports", network_id=network_id, name=name) or call(
        OP, "POST", "/ports", json={"port": {"network_id": network_id, "name": name,
                                             "fixed_ips": [{"ip_address": ip}]}})["port"]
    call(ADMIN, "PUT", f"/ports/{p['id']}",
         json={"port": {"port_security_enabled": False, "security_groups": []}})
    return p


def up():
    net = one("networks", name=NET) or call(OP, "POST", "/networks",
                                            json={"network": {"name": NET}})["network"]
    sub = one("subnets", name=SUBNET, network_id=net["id"]) or call(
        OP, "POST", "/subnets", json={"subnet": {"name": SUBNET, "network_id": net["id"],
                                                 "ip_version": 4, "cidr": CIDR,
                                                 "gateway_ip": GW}})["subnet"]
    if not one("ports", network_id=net["id"], device_id=SVC_ROUTER):
        call(OP, "PUT", f"/routers/{SVC_ROUTER}/add_router_interface", json={"subnet_id": sub["id"]})
    for name, p, plen, gw in (("pod", port(TRANSIT, "demo-gateway-pod", POD_IP), 24, "10.254.0.1"),
                              ("vm", port(net["id"], "demo-svc01-vm", VM_IP), 16, GW)):
        print(name, p["id"], p["mac_address"], f"{p['fixed_ips'][0]['ip_address']}/{plen}", gw)


def down():
    for network_id, name in ((TRANSIT, "demo-gateway-pod"), (None, "demo-svc01-vm")):
        params = {"name": name, **({"network_id": network_id} if network_id else {})}
        for p in call(OP, "GET", "/ports", params=params)["ports"]:
            call(OP, "DELETE", f"/ports/{p['id']}", ok=(204, 404))
    net = one("networks", name=NET)
    if net:
        for p in call(OP, "GET", "/ports", params={"network_id": net["id"], "device_id": SVC_ROUTER})["ports"]:
            call(OP, "PUT", f"/routers/{SVC_ROUTER}/remove_router_interface",
                 json={"port_id": p["id"]}, ok=(200, 404))
        call(OP, "DELETE", f"/networks/{net['id']}", ok=(204, 404))


{"up": up, "down": down}[sys.argv[1] if len(sys.argv) > 1 else "up"]()
