#!/usr/bin/env python3
"""Keystone setup for the lab (run by up.sh with the lab venv's python).

Creates (idempotently, find-by-name first) the projects, users, role
assignments, the neutron service + endpoints, and application credentials,
then writes everything the later steps need to $LAB/run/keystone.json.

Application credential secrets are only revealed by Keystone at creation time,
so existing credentials with the same name are deleted and re-created; the
JSON file is the single place their secrets are kept (up.sh's "already up"
path re-reads it to rewrite lab.env).

`ks_setup.py --ensure-policy-priv` (up.sh's "already up" path) only makes sure
the identities added after the first labs were started exist — the
policy-privileged identity (role, user, app cred; see POLICY_PRIV_ROLE) and the
estate-scale project (SCALE_PROJECT) — and adds them to keystone.json: a lab
started before they existed gains them without a restart, and every other app
cred keeps its ID and secret (tests running at that moment hold them). It also
ensures the TLS and OVN regions (ensure_region_catalogs), which change no other endpoint.
"""
import json
import os
import sys

import requests

KS = "http://127.0.0.1:5000/v3"
NEUTRON_URL = "http://127.0.0.1:9696"
REGION = "RegionOne"
T = 30  # seconds per HTTP call
# The HTTPS endpoint (up.sh's TLS proxy): Neutron behind it is listed in a region of its own,
# so a client picks it with OS_REGION_NAME while RegionOne stays exactly as it was.
TLS_REGION = os.environ.get("OSLAB_TLS_REGION", "RegionTLS")
TLS_NEUTRON_URL = f"https://127.0.0.1:{os.environ.get('OSLAB_TLS_NEUTRON_PORT', '19696')}"
# The ML2/OVN Neutron (ovn.sh) is a region of its own too: the same Keystone, identities and
# application credentials, another network endpoint, picked with OS_REGION_NAME.
OVN_REGION = os.environ.get("OSLAB_OVN_REGION", "RegionOVN")
OVN_NEUTRON_URL = "http://127.0.0.1:9698"
# The older Neutron (older.sh, release 2025.1) likewise.
OLDER_REGION = "Region2025"
OLDER_NEUTRON_URL = "http://127.0.0.1:9699"

# A role that is privileged only because the lab's Neutron policy says so: up.sh writes
# `context_is_admin: role:admin or role:<this>` into $LAB/etc/neutron/policy.yaml. Its name
# contains no admin/service/advsvc, so the operator's role-name check passes it and only the
# privilege probe (a read Neutron allows a cloud admin alone) can tell. No other user holds it,
# so the override changes nothing for anyone else.
POLICY_PRIV_ROLE = os.environ.get("OSLAB_POLICY_PRIV_ROLE", "net_operator")

# Fixed test credentials of the lab (no real system behind them).
ADMIN = {"username": "admin", "password": "adminpass", "project": "admin"}
# The estate-scale tests' own project: neutron_setup.py raises its router_route quota (50+
# routes on one gateway router), which the operator project keeps at Neutron's default 30
# (the parity table observes that limit there).
SCALE_PROJECT = "scale"
# A project with Neutron's default quotas (neutron_setup.py sets them explicitly, the lab's
# neutron.conf leaving everything unlimited): the quota tests run an operator there.
DEFAULTS_PROJECT = "defaults"
PROJECTS = ("service", "operator", "customer", "customer2", SCALE_PROJECT, DEFAULTS_PROJECT)
# name -> (password, project, [roles in that project])
USERS = {
    "neutron": ("neutronpass", "service", ["admin", "service"]),
    "operator": ("operatorpass", "operator", ["member"]),
    "operator-admin": ("operatoradminpass", "operator", ["admin"]),
    "customer": ("customerpass", "customer", ["member"]),
    "customer2": ("customer2pass", "customer2", ["member"]),
    SCALE_PROJECT: ("scalepass", SCALE_PROJECT, ["member"]),
    DEFAULTS_PROJECT: ("defaultspass", DEFAULTS_PROJECT, ["member"]),
    # privileged customer identity: its app cred is what the operator must refuse
    "customer-admin": ("customeradminpass", "customer", ["admin"]),
    # privileged by policy only (POLICY_PRIV_ROLE): the name check cannot see it
    "customer-netop": ("customernetoppass", "customer", ["member", POLICY_PRIV_ROLE]),
}
# key -> (user, app cred name, roles to delegate or None for "all roles of the user")
APP_CREDS = {
    "operator": ("operator", "operator-ac", ["member"]),
    "customer": ("customer", "customer-ac", ["member"]),
    "customer2": ("customer2", "customer2-ac", ["member"]),
    # no role list: the app cred carries every role the user has (admin, and
    # the implied member/reader) -> a "privileged" credential.
    "customer_priv": ("customer-admin", "customer-admin-ac", None),
    "customer_policypriv": ("customer-netop", "customer-netop-ac", ["member", POLICY_PRIV_ROLE]),
}
POLICY_PRIV_KEY, POLICY_PRIV_USER = "customer_policypriv", "customer-netop"


def die(msg, resp=None):
    if resp is not None:
        msg += f": HTTP {resp.status_code} {resp.text[:500]}"
    print(f"ks_setup: {msg}", file=sys.stderr)
    sys.exit(1)


def check(resp, what, ok=(200, 201, 204)):
    if resp.status_code not in ok:
        die(what, resp)
    return resp


def password_token(user, pw, project):
    body = {"auth": {"identity": {"methods": ["password"], "password": {
        "user": {"name": user, "domain": {"name": "Default"}, "password": pw}}},
        "scope": {"project": {"name": project, "domain": {"name": "Default"}}}}}
    r = check(requests.post(KS + "/auth/tokens", json=body, timeout=T),
              f"password token for {user}@{project}")
    return r.headers["X-Subject-Token"], r.json()["token"]


def app_cred_token(ac_id, secret, must_work=True):
    """The token dict, or None when Keystone refuses and must_work is False."""
    body = {"auth": {"identity": {"methods": ["application_credential"],
                                  "application_credential": {"id": ac_id, "secret": secret}}}}
    r = requests.post(KS + "/auth/tokens", json=body, timeout=T)
    if r.status_code != 201 and not must_work:
        return None
    return check(r, f"app cred token for {ac_id}").json()["token"]


ADM, _ = password_token(ADMIN["username"], ADMIN["password"], ADMIN["project"])
H = {"X-Auth-Token": ADM}


def find(kind, **params):
    r = check(requests.get(f"{KS}/{kind}", params=params, headers=H, timeout=T), f"list {kind}")
    items = r.json()[kind]
    return items[0]["id"] if items else None


def ensure(kind, single, name, extra=None):
    found = find(kind, name=name)
    if found:
        return found
    body = {"name": name, **(extra or {})}
    r = check(requests.post(f"{KS}/{kind}", json={single: body}, headers=H, timeout=T),
              f"create {single} {name}")
    return r.json()[single]["id"]


def grant(project_id, user_id, role_id):
    check(requests.put(f"{KS}/projects/{project_id}/users/{user_id}/roles/{role_id}",
                       headers=H, timeout=T), "role grant")


def ensure_user(name, proj, roles):
    pw, p, rl = USERS[name]
    uid = ensure("users", "user", name, {"domain_id": "default", "password": pw,
                                         "default_project_id": proj[p]})
    for role in rl:
        grant(proj[p], uid, roles[role])
    return uid


def make_app_cred(key, users, proj):
    """(Re)create one application credential and prove its token has the roles it should."""
    user, ac_name, ac_roles = APP_CREDS[key]
    pw, p, _ = USERS[user]
    # Keystone only lets a user create app creds for itself, so each one is created
    # with the owning user's own project-scoped token.
    utok, _ = password_token(user, pw, p)
    UH = {"X-Auth-Token": utok}
    base = f"{KS}/users/{users[user]}/application_credentials"
    r = check(requests.get(base, params={"name": ac_name}, headers=UH, timeout=T), "list app creds")
    for old in r.json().get("application_credentials", []):
        check(requests.delete(f"{base}/{old['id']}", headers=UH, timeout=T), "delete old app cred")
    body = {"name": ac_name, "description": "bnerd-vpn-operator lab"}
    if ac_roles is not None:
        body["roles"] = [{"name": n} for n in ac_roles]
    r = check(requests.post(base, json={"application_credential": body}, headers=UH, timeout=T),
              f"create app cred {ac_name}", ok=(201,))
    ac = r.json()["application_credential"]
    # Verify: a token from the app cred is scoped to the user's project.
    tok = app_cred_token(ac["id"], ac["secret"])
    got_roles = sorted(x["name"] for x in tok["roles"])
    if tok["project"]["id"] != proj[p]:
        die(f"app cred {ac_name} scoped to {tok['project']['id']}, expected {proj[p]}")
    if key == "customer_priv" and "admin" not in got_roles:
        die(f"privileged app cred {ac_name} has no admin role: {got_roles}")
    if key != "customer_priv" and "admin" in got_roles:
        die(f"member app cred {ac_name} unexpectedly has admin: {got_roles}")
    if key == POLICY_PRIV_KEY and POLICY_PRIV_ROLE not in got_roles:
        die(f"app cred {ac_name} lacks {POLICY_PRIV_ROLE}: {got_roles}")
    print(f"ks_setup: app cred {ac_name} ({user}@{p}) ok, token roles={got_roles}", file=sys.stderr)
    return {"id": ac["id"], "secret": ac["secret"], "name": ac_name, "user": user}


def user_entry(name, users):
    return {"id": users[name], "password": USERS[name][0], "project": USERS[name][1]}


def write_json(out):
    path = os.path.join(os.environ["LAB"], "run", "keystone.json")
    tmp = path + ".tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, path)
    print(f"ks_setup: wrote {path}", file=sys.stderr)


def ensure_scale(ks):
    """The estate-scale and default-quota projects with their member users, into an
    existing keystone.json; True when it changed."""
    changed = False
    for name in (SCALE_PROJECT, DEFAULTS_PROJECT):
        if name in ks["projects"] and name in ks["users"]:
            continue
        ks["projects"][name] = ensure("projects", "project", name, {"domain_id": "default"})
        uid = ensure_user(name, ks["projects"], ks["roles"])
        ks["users"][name] = user_entry(name, {name: uid})
        print(f"ks_setup: project and user {name} created", file=sys.stderr)
        changed = True
    return changed


def ensure_policy_priv():
    """Only the identities added later, into an existing keystone.json; the other app
    creds are left exactly as they are."""
    path = os.path.join(os.environ["LAB"], "run", "keystone.json")
    with open(path) as f:
        ks = json.load(f)
    if ensure_scale(ks):
        write_json(ks)
    have = ks["app_creds"].get(POLICY_PRIV_KEY)
    if have:
        tok = app_cred_token(have["id"], have["secret"], must_work=False)
        if tok and POLICY_PRIV_ROLE in {r["name"] for r in tok["roles"]}:
            print(f"ks_setup: {have['name']} present and working", file=sys.stderr)
            return
    roles = {**ks["roles"], POLICY_PRIV_ROLE: ensure("roles", "role", POLICY_PRIV_ROLE)}
    users = {n: u["id"] for n, u in ks["users"].items()}
    users[POLICY_PRIV_USER] = ensure_user(POLICY_PRIV_USER, ks["projects"], roles)
    ks["roles"] = roles
    ks["users"][POLICY_PRIV_USER] = user_entry(POLICY_PRIV_USER, users)
    ks["app_creds"][POLICY_PRIV_KEY] = make_app_cred(POLICY_PRIV_KEY, users, ks["projects"])
    write_json(ks)


def ensure_region_catalog(region, url, description):
    """Region `region` with Neutron's public/internal/admin endpoints at `url`; an endpoint
    there with another URL is corrected. Nothing in RegionOne is touched."""
    r = requests.get(f"{KS}/regions/{region}", headers=H, timeout=T)
    if r.status_code == 404:
        check(requests.post(KS + "/regions", json={"region": {
            "id": region, "description": description}},
            headers=H, timeout=T), f"create region {region}", ok=(201,))
    else:
        check(r, f"get region {region}")
    svc = find("services", name="neutron")
    if not svc:
        die("no neutron service in the catalog")
    r = check(requests.get(KS + "/endpoints", params={"service_id": svc}, headers=H, timeout=T),
              "list endpoints")
    have = {e["interface"]: e for e in r.json()["endpoints"] if e.get("region_id") == region}
    for itf in ("public", "internal", "admin"):
        e = have.get(itf)
        if e is None:
            check(requests.post(KS + "/endpoints", json={"endpoint": {
                "service_id": svc, "interface": itf, "region_id": region,
                "url": url}}, headers=H, timeout=T), f"create {itf} endpoint in {region}")
        elif e["url"] != url:
            check(requests.patch(f"{KS}/endpoints/{e['id']}", json={"endpoint": {
                "url": url}}, headers=H, timeout=T), f"update {itf} endpoint in {region}")
    print(f"ks_setup: region {region}: network endpoints at {url}", file=sys.stderr)


def ensure_region_catalogs():
    ensure_region_catalog(TLS_REGION, TLS_NEUTRON_URL,
                          "bnerd-vpn-operator lab: Neutron through the TLS proxy")
    ensure_region_catalog(OVN_REGION, OVN_NEUTRON_URL,
                          "bnerd-vpn-operator lab: the ML2/OVN Neutron (lab/openstack/ovn.sh)")
    ensure_region_catalog(OLDER_REGION, OLDER_NEUTRON_URL,
                          "bnerd-vpn-operator lab: Neutron 2025.1 (lab/openstack/older.sh)")


if "--ensure-policy-priv" in sys.argv[1:]:
    ensure_policy_priv()
    ensure_region_catalogs()
    sys.exit(0)

# ---- projects, users, roles --------------------------------------------------
# "admin", "member", "reader" come from keystone-manage bootstrap; "service" and
# POLICY_PRIV_ROLE are ours.
roles = {n: ensure("roles", "role", n)
         for n in ("admin", "member", "reader", "service", POLICY_PRIV_ROLE)}
proj = {n: ensure("projects", "project", n, {"domain_id": "default"}) for n in PROJECTS}
proj["admin"] = find("projects", name="admin")
users = {name: ensure_user(name, proj, roles) for name in USERS}

# ---- neutron service + endpoints in RegionOne ---------------------------------
svc = find("services", name="neutron")
if not svc:
    r = check(requests.post(KS + "/services", json={"service": {"name": "neutron", "type": "network"}},
                            headers=H, timeout=T), "create neutron service")
    svc = r.json()["service"]["id"]
r = check(requests.get(KS + "/endpoints", params={"service_id": svc}, headers=H, timeout=T),
          "list endpoints")
have = {e["interface"] for e in r.json()["endpoints"] if e.get("region_id") == REGION}
for itf in ("public", "internal", "admin"):
    if itf not in have:
        check(requests.post(KS + "/endpoints", json={"endpoint": {
            "service_id": svc, "interface": itf, "region_id": REGION, "url": NEUTRON_URL}},
            headers=H, timeout=T), f"create {itf} endpoint")

ensure_region_catalogs()

# ---- application credentials ---------------------------------------------------
acs = {key: make_app_cred(key, users, proj) for key in APP_CREDS}

# ---- a revoked application credential --------------------------------------------
# Created, proven to work, then deleted: Keystone answers 404 when it is used again. The
# parity table holds the fake's answer to this one.
utok, _ = password_token("customer", USERS["customer"][0], "customer")
UH = {"X-Auth-Token": utok}
base = f"{KS}/users/{users['customer']}/application_credentials"
r = check(requests.post(base, json={"application_credential": {
    "name": f"customer-revoked-ac-{os.getpid()}", "roles": [{"name": "member"}]}},
    headers=UH, timeout=T), "create app cred to revoke", ok=(201,))
rev = r.json()["application_credential"]
app_cred_token(rev["id"], rev["secret"])
check(requests.delete(f"{base}/{rev['id']}", headers=UH, timeout=T), "revoke app cred")
body = {"auth": {"identity": {"methods": ["application_credential"],
                              "application_credential": {"id": rev["id"], "secret": rev["secret"]}}}}
r = requests.post(KS + "/auth/tokens", json=body, timeout=T)
if r.status_code != 404:
    die("a revoked app cred should give 404", r)
print(f"ks_setup: revoked app cred answers {r.status_code} {r.json()['error']['title']}", file=sys.stderr)
acs["customer_revoked"] = {"id": rev["id"], "secret": rev["secret"], "name": rev["name"],
                           "user": "customer"}

write_json({
    "admin": {**ADMIN, "project_id": proj["admin"]},
    "projects": proj,
    "users": {n: user_entry(n, users) for n in USERS},
    "app_creds": acs,
    "roles": roles,
})
