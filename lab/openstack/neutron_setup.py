#!/usr/bin/env python3
"""Neutron-side setup of the lab (run by up.sh with the lab venv's python).

Steps 1 and 3 run against both databases: the API-only Neutron's (9696; 9697 shares it) and
the ML2/OVN Neutron's (9698, ovn.sh).

1. As the cloud admin: unlimited (-1) quotas for the operator/customer projects
   (tests create many ports/routers/RBAC policies), verified by reading back.
2. Checks the API extensions the operator relies on are loaded, and that the policy
   override up.sh writes (policy.yaml: POLICY_PRIV_ROLE counts as cloud admin) is in force:
   the operator's privilege probe answers 200 to that role's app cred and 403 to a member's.
3. As the operator user (member of "operator"): the demo fabric, found by name
   first so re-runs are no-ops:
     network vpn-transit, subnet vpn-transit-subnet 10.254.0.0/24 gw .1 (not shared),
     router shoot--services--vpn01 (gateway cluster router) with an interface on
     the transit subnet (-> 10.254.0.1), router shoot--services--svc01 (no interface).
4. Writes $LAB/run/lab.env and $LAB/run/clouds.yaml (atomically), from
   $LAB/run/keystone.json (written by ks_setup.py) plus the fabric IDs.
"""
import json
import os
import re
import sys

import requests
import yaml

LAB = os.environ["LAB"]
RUN = os.path.join(LAB, "run")
KS = "http://127.0.0.1:5000/v3"
NEUTRON_URL = "http://127.0.0.1:9696"
TAGGED_URL = "http://127.0.0.1:9697"
# The ML2/OVN Neutron (ovn.sh): a database of its own, so quotas and the demo fabric are made
# there too; Keystone lists it in region OVN_REGION.
OVN_URL = "http://127.0.0.1:9698"
OVN_REGION = os.environ.get("OSLAB_OVN_REGION", "RegionOVN")
OVN_CHASSIS = os.environ.get("OVN_CHASSIS", "bnerd-lab-chassis")
# The older Neutron (older.sh, release 2025.1): its own database too, region OLDER_REGION. It
# has no router_route quota (a router's routes are the server's max_routes there).
OLDER_URL = "http://127.0.0.1:9699"
OLDER_REGION = "Region2025"
REGION = "RegionOne"
T = 60
# The HTTPS endpoint (up.sh's TLS proxy, its CA, and ks_setup.py's region for it).
TLS_CACERT = os.path.join(os.environ.get("OSLAB_TLS_DIR", os.path.join(LAB, "var", "tls")), "ca.pem")
TLS_KS = f"https://127.0.0.1:{os.environ.get('OSLAB_TLS_KEYSTONE_PORT', '15000')}/v3"
TLS_NEUTRON_URL = f"https://127.0.0.1:{os.environ.get('OSLAB_TLS_NEUTRON_PORT', '19696')}"
TLS_REGION = os.environ.get("OSLAB_TLS_REGION", "RegionTLS")

QUOTA = {"network": -1, "subnet": -1, "port": -1, "router": -1, "rbac_policy": -1}
# The estate-scale project's routes per router, raised as an estate with many ClusterLinks
# raises it for its gateway router ([QUOTAS] quota_router_route, Neutron's former
# max_routes). Per project through the quota API, so the lab needs no restart, and the
# operator project keeps Neutron's default 30 (the parity table observes that limit).
SCALE_ROUTES = 1100
# Neutron's own defaults ([QUOTAS] in neutron.conf), for the project the quota tests run an
# operator in (docs/operations.md, "Neutron's quotas").
DEFAULTS = {"network": 100, "subnet": 100, "port": 500, "router": 10, "rbac_policy": 10,
            "router_route": 30}
REQUIRED_EXTENSIONS = ("router", "extraroute", "extraroute-atomic", "standard-attr-tag",
                       "tag-creation", "rbac-policies", "standard-attr-revisions",
                       "revision-if-match", "quotas")
NET, SUBNET, CIDR, GW_IP = "vpn-transit", "vpn-transit-subnet", "10.254.0.0/24", "10.254.0.1"
GW_ROUTER, SVC_ROUTER = "shoot--services--vpn01", "shoot--services--svc01"
# The operator's privilege probe (bnerd_cloud::ADMIN_READ_PROBE_PATH): quota details of a
# project nobody has. Neutron answers it only when context.is_admin, i.e. context_is_admin.
PROBE = "/quotas/00000000000000000000000000000000/details"


def log(msg):
    print(f"neutron_setup: {msg}", file=sys.stderr)


def die(msg, resp=None):
    if resp is not None:
        msg += f": HTTP {resp.status_code} {resp.text[:500]}"
    log(msg)
    sys.exit(1)


def call(tok, method, path, what, ok=(200, 201, 204), base=NEUTRON_URL, **kw):
    r = requests.request(method, base + "/v2.0" + path, headers={"X-Auth-Token": tok}, timeout=T, **kw)
    if r.status_code not in ok:
        die(f"{what} ({method} {path})", r)
    return r.json() if r.content else None


def app_cred_token(ac):
    body = {"auth": {"identity": {"methods": ["application_credential"],
                                  "application_credential": {"id": ac["id"], "secret": ac["secret"]}}}}
    r = requests.post(KS + "/auth/tokens", json=body, timeout=T)
    if r.status_code != 201:
        die(f"token for app cred {ac['name']}", r)
    return r.headers["X-Subject-Token"]


def password_token(user, pw, project):
    body = {"auth": {"identity": {"methods": ["password"], "password": {
        "user": {"name": user, "domain": {"name": "Default"}, "password": pw}}},
        "scope": {"project": {"name": project, "domain": {"name": "Default"}}}}}
    r = requests.post(KS + "/auth/tokens", json=body, timeout=T)
    if r.status_code != 201:
        die(f"token for {user}@{project}", r)
    return r.headers["X-Subject-Token"]


with open(os.path.join(RUN, "keystone.json")) as f:
    ks = json.load(f)
proj, users, acs, adm = ks["projects"], ks["users"], ks["app_creds"], ks["admin"]

# ---- 1. quotas (admin), in each database ------------------------------------------
admin_tok = password_token(adm["username"], adm["password"], adm["project"])
for base in (NEUTRON_URL, OVN_URL, OLDER_URL):
    for p in ("operator", "customer", "customer2"):
        call(admin_tok, "PUT", f"/quotas/{proj[p]}", f"set quota {p}", json={"quota": QUOTA}, base=base)
        got = call(admin_tok, "GET", f"/quotas/{proj[p]}", f"get quota {p}", base=base)["quota"]
        bad = {k: got.get(k) for k in QUOTA if got.get(k) != -1}
        if bad:
            die(f"quota of {p} at {base} not unlimited after PUT: {bad}")
    if "scale" in proj and base != OLDER_URL:
        want = {**QUOTA, "router_route": SCALE_ROUTES}
        call(admin_tok, "PUT", f"/quotas/{proj['scale']}", "set quota scale", json={"quota": want}, base=base)
        got = call(admin_tok, "GET", f"/quotas/{proj['scale']}", "get quota scale", base=base)["quota"]
        if got.get("router_route") != SCALE_ROUTES:
            die(f"router_route quota of scale at {base} is {got.get('router_route')}, wanted {SCALE_ROUTES}")
    if "defaults" in proj:
        want = {k: v for k, v in DEFAULTS.items() if base != OLDER_URL or k != "router_route"}
        call(admin_tok, "PUT", f"/quotas/{proj['defaults']}", "set quota defaults",
             json={"quota": want}, base=base)
        got = call(admin_tok, "GET", f"/quotas/{proj['defaults']}", "get quota defaults",
                   base=base)["quota"]
        bad = {k: got.get(k) for k in want if got.get(k) != want[k]}
        if bad:
            die(f"quota of defaults at {base} not Neutron's defaults after PUT: {bad}")
log("quotas unlimited (-1) for operator, customer, customer2 (scale: router_route "
    f"{SCALE_ROUTES}) at {NEUTRON_URL}, {OVN_URL} and {OLDER_URL}: " + ",".join(QUOTA))

# ---- 2. extensions --------------------------------------------------------------
op_user = users["operator"]
op_tok = password_token("operator", op_user["password"], op_user["project"])
for base in (NEUTRON_URL, OVN_URL, OLDER_URL):
    aliases = {e["alias"] for e in call(op_tok, "GET", "/extensions", "list extensions", base=base)["extensions"]}
    missing = [a for a in REQUIRED_EXTENSIONS if a not in aliases]
    if missing:
        die(f"neutron at {base} lacks extensions {missing}")
    log(f"{base}: {len(aliases)} extensions, required present: {' '.join(REQUIRED_EXTENSIONS)}")

# ---- 2b. the policy override ------------------------------------------------------
# oslo.policy re-reads policy.yaml when it changes, so a lab started before the file existed
# answers the same way once up.sh has written it. Both APIs read the same etc/neutron.
for key, want in (("customer_policypriv", 200), ("customer", 403), ("customer_priv", 200)):
    tok = app_cred_token(acs[key])
    for url in (NEUTRON_URL, TAGGED_URL, OVN_URL, OLDER_URL):
        r = requests.get(f"{url}/v2.0{PROBE}", headers={"X-Auth-Token": tok}, timeout=T)
        if r.status_code != want:
            die(f"privilege probe GET {url}/v2.0{PROBE} as {acs[key]['name']}: want {want}", r)
log(f"policy override in force on the three APIs: GET /v2.0{PROBE} is 200 for customer-netop-ac "
    "and customer-admin-ac, 403 for customer-ac")

# ---- 3. fabric (operator, member) --------------------------------------------------
op_pid = proj["operator"]


def fabric(base):
    """The demo fabric on the Neutron at `base`, found by name first."""
    def find_one(kind, **filters):
        items = call(op_tok, "GET", f"/{kind}", f"list {kind}",
                     params={**filters, "project_id": op_pid}, base=base)[kind]
        if len(items) > 1:
            log(f"WARNING: {len(items)} {kind} at {base} match {filters}, using the first")
        return items[0] if items else None

    def c(method, path, what, **kw):
        return call(op_tok, method, path, what, base=base, **kw)

    net = find_one("networks", name=NET) or c(
        "POST", "/networks", "create network",
        json={"network": {"name": NET}})["network"]
    sub = find_one("subnets", name=SUBNET, network_id=net["id"]) or c(
        "POST", "/subnets", "create subnet",
        json={"subnet": {"name": SUBNET, "network_id": net["id"], "ip_version": 4,
                         "cidr": CIDR, "gateway_ip": GW_IP}})["subnet"]
    if sub["cidr"] != CIDR or sub["gateway_ip"] != GW_IP:
        die(f"existing subnet {SUBNET} at {base} is {sub['cidr']} gw {sub['gateway_ip']}, expected {CIDR} gw {GW_IP}")
    gw = find_one("routers", name=GW_ROUTER) or c(
        "POST", "/routers", "create gateway router",
        json={"router": {"name": GW_ROUTER}})["router"]
    svc = find_one("routers", name=SVC_ROUTER) or c(
        "POST", "/routers", "create svc01 router",
        json={"router": {"name": SVC_ROUTER}})["router"]

    # gateway router interface on the transit subnet (takes the subnet's gateway_ip)
    gw_ports = c("GET", "/ports", "list gateway router ports",
                 params={"device_id": gw["id"], "network_id": net["id"]})["ports"]
    if not gw_ports:
        c("PUT", f"/routers/{gw['id']}/add_router_interface", "add gateway interface",
          json={"subnet_id": sub["id"]})
        gw_ports = c("GET", "/ports", "list gateway router ports",
                     params={"device_id": gw["id"], "network_id": net["id"]})["ports"]
    gw_ips = [ip["ip_address"] for p in gw_ports for ip in p["fixed_ips"]]
    if GW_IP not in gw_ips:
        die(f"gateway router interface at {base} has {gw_ips}, expected {GW_IP}")
    gw_port = next(p for p in gw_ports if any(ip["ip_address"] == GW_IP for ip in p["fixed_ips"]))
    log(f"fabric ok at {base}: network {net['id']} subnet {sub['id']} gw-router {gw['id']} "
        f"(if {GW_IP} port {gw_port['id']}) svc01 {svc['id']}")
    return net, sub, gw, svc, gw_port


net, sub, gw, svc, gw_port = fabric(NEUTRON_URL)
ovn_net, ovn_sub, ovn_gw, ovn_svc, ovn_gw_port = fabric(OVN_URL)

# ---- 4. lab.env + clouds.yaml ---------------------------------------------------------
clouds_path = os.path.join(RUN, "clouds.yaml")
env = {
    "OS_AUTH_URL": KS,
    "OS_REGION_NAME": REGION,
    "OS_USER_DOMAIN_NAME": "Default",
    "OS_PROJECT_DOMAIN_NAME": "Default",
    "OS_IDENTITY_API_VERSION": "3",
    "OS_INTERFACE": "public",
    "OS_CLIENT_CONFIG_FILE": clouds_path,
    "LAB_DIR": LAB,
    "LAB_KEYSTONE_URL": KS,
    "LAB_NEUTRON_URL": NEUTRON_URL,
    # Same database, ML2 with tag_ports_during_bulk_creation: create-body tags are kept.
    "LAB_NEUTRON_TAGGED_URL": TAGGED_URL,
    "LAB_CLOUDS_YAML": clouds_path,
    "LAB_ADMIN_USERNAME": adm["username"],
    "LAB_ADMIN_PASSWORD": adm["password"],
    "LAB_ADMIN_PROJECT_NAME": adm["project"],
    "LAB_ADMIN_PROJECT_ID": adm["project_id"],
    # The same Keystone and Neutron through a TLS-terminating proxy whose certificate the lab's
    # CA signed: OS_AUTH_URL=LAB_TLS_AUTH_URL, OS_REGION_NAME=LAB_TLS_REGION (whose catalog
    # lists LAB_TLS_NEUTRON_URL) and OS_CACERT=LAB_TLS_CACERT go through TLS end to end.
    "LAB_TLS_CACERT": TLS_CACERT,
    "LAB_TLS_AUTH_URL": TLS_KS,
    "LAB_TLS_NEUTRON_URL": TLS_NEUTRON_URL,
    "LAB_TLS_REGION": TLS_REGION,
}


def user_block(prefix, user, with_project=True):
    u = users[user]
    env[f"{prefix}_USERNAME"] = user
    env[f"{prefix}_PASSWORD"] = u["password"]
    if with_project:
        env[f"{prefix}_PROJECT_NAME"] = u["project"]
        env[f"{prefix}_PROJECT_ID"] = proj[u["project"]]


def ac_block(prefix, key):
    env[f"{prefix}_AC_ID"] = acs[key]["id"]
    env[f"{prefix}_AC_SECRET"] = acs[key]["secret"]
    env[f"{prefix}_AC_NAME"] = acs[key]["name"]


user_block("LAB_OPERATOR", "operator")
ac_block("LAB_OPERATOR", "operator")
user_block("LAB_OPERATOR_ADMIN", "operator-admin")
user_block("LAB_CUSTOMER", "customer")
ac_block("LAB_CUSTOMER", "customer")
user_block("LAB_CUSTOMER2", "customer2")
ac_block("LAB_CUSTOMER2", "customer2")
user_block("LAB_CUSTOMER_ADMIN", "customer-admin")
if "scale" in users:
    user_block("LAB_SCALE", "scale")
if "defaults" in users:
    user_block("LAB_DEFAULTS", "defaults")
ac_block("LAB_CUSTOMER_PRIV", "customer_priv")
ac_block("LAB_CUSTOMER_POLICYPRIV", "customer_policypriv")
ac_block("LAB_CUSTOMER_REVOKED", "customer_revoked")
env.update({
    "LAB_TRANSIT_NETWORK_NAME": NET,
    "LAB_TRANSIT_NETWORK_ID": net["id"],
    "LAB_TRANSIT_SUBNET_NAME": SUBNET,
    "LAB_TRANSIT_SUBNET_ID": sub["id"],
    "LAB_TRANSIT_CIDR": CIDR,
    "LAB_TRANSIT_GATEWAY_IP": GW_IP,
    "LAB_GATEWAY_ROUTER_NAME": GW_ROUTER,
    "LAB_GATEWAY_ROUTER_ID": gw["id"],
    "LAB_GATEWAY_ROUTER_PORT_ID": gw_port["id"],
    "LAB_SVC01_ROUTER_NAME": SVC_ROUTER,
    "LAB_SVC01_ROUTER_ID": svc["id"],
    # The ML2/OVN Neutron (ovn.sh): the same identities in region LAB_OVN_REGION, a database
    # of its own (its own demo fabric), OVN's databases, and the chassis whose br-int (in the
    # vswitch DB LAB_OVN_OVS_DB) binds a Neutron port to a veth by external_ids:iface-id.
    "LAB_NEUTRON_OVN_URL": OVN_URL,
    "LAB_OVN_REGION": OVN_REGION,
    # The older Neutron (older.sh): the same identities in region LAB_2025_REGION, its own
    # database, no fabric of the lab's own (the tests there make theirs).
    "LAB_NEUTRON_2025_URL": OLDER_URL,
    "LAB_2025_REGION": OLDER_REGION,
    "LAB_OVN_NB_DB": "tcp:127.0.0.1:6641",
    "LAB_OVN_SB_DB": "tcp:127.0.0.1:6642",
    "LAB_OVN_OVS_DB": f"unix:{LAB}/ovn/run/ovs-db.sock",
    "LAB_OVN_CHASSIS": OVN_CHASSIS,
    "LAB_OVN_TRANSIT_NETWORK_ID": ovn_net["id"],
    "LAB_OVN_TRANSIT_SUBNET_ID": ovn_sub["id"],
    "LAB_OVN_GATEWAY_ROUTER_ID": ovn_gw["id"],
    "LAB_OVN_GATEWAY_ROUTER_PORT_ID": ovn_gw_port["id"],
    "LAB_OVN_SVC01_ROUTER_ID": ovn_svc["id"],
})

# The file must be sourceable without quoting: refuse any value that would need it.
for k, v in env.items():
    if not re.fullmatch(r"[A-Za-z0-9_./:@+=,-]*", v):
        die(f"value of {k} needs shell quoting: {v!r}")

clouds = {"clouds": {
    "lab-operator": {
        "auth_type": "password",
        "auth": {"auth_url": KS, "username": "operator", "password": op_user["password"],
                 "project_name": op_user["project"], "user_domain_name": "Default",
                 "project_domain_name": "Default"},
        "region_name": REGION, "interface": "public", "identity_api_version": 3,
    },
    "lab-operator-ac": {
        "auth_type": "v3applicationcredential",
        "auth": {"auth_url": KS, "application_credential_id": acs["operator"]["id"],
                 "application_credential_secret": acs["operator"]["secret"]},
        "region_name": REGION, "interface": "public", "identity_api_version": 3,
    },
    # The operator on the ML2/OVN Neutron (region RegionOVN).
    "lab-operator-ovn": {
        "auth_type": "password",
        "auth": {"auth_url": KS, "username": "operator", "password": op_user["password"],
                 "project_name": op_user["project"], "user_domain_name": "Default",
                 "project_domain_name": "Default"},
        "region_name": OVN_REGION, "interface": "public", "identity_api_version": 3,
    },
    # The operator's app cred through the TLS proxy, trusting the lab CA by `cacert`.
    "lab-operator-tls": {
        "auth_type": "v3applicationcredential",
        "auth": {"auth_url": TLS_KS, "application_credential_id": acs["operator"]["id"],
                 "application_credential_secret": acs["operator"]["secret"]},
        "region_name": TLS_REGION, "interface": "public", "identity_api_version": 3,
        "cacert": TLS_CACERT,
    },
}}


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text)
    os.replace(tmp, path)


write_atomic(clouds_path, yaml.safe_dump(clouds, sort_keys=False))
write_atomic(os.path.join(RUN, "lab.env"),
             "# written by lab/openstack/up.sh; plain KEY=value, sourceable\n"
             + "".join(f"{k}={v}\n" for k, v in env.items()))
log(f"wrote {os.path.join(RUN, 'lab.env')} and {clouds_path}")
