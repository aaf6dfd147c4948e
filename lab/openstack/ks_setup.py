#!/usr/bin/env python3
"""Keystone setup for the lab (run by up.sh with the lab venv's python).

Creates (idempotently, find-by-name first) the projects, users, role
assignments, the neutron service + endpoints, and application credentials,
then writes everything the later steps need to $LAB/run/keystone.json.

Application credential secrets are only revealed by Keystone at creation time,
so existing credentials with the same name are deleted and re-created; the
JSON file is the single place their secrets are kept (up.sh's "already up"
path re-reads it to rewrite lab.env).
"""
import json
import os
import sys

import requests

KS = "http://127.0.0.1:5000/v3"
NEUTRON_URL = "http://127.0.0.1:9696"
REGION = "RegionOne"
T = 30  # seconds per HTTP call

# Fixed test credentials of the lab (no real system behind them).
ADMIN = {"username": "admin", "password": "adminpass", "project": "admin"}
PROJECTS = ("service", "operator", "customer", "customer2")
# name -> (password, project, [roles in that project])
USERS = {
    "neutron": ("neutronpass", "service", ["admin", "service"]),
    "operator": ("operatorpass", "operator", ["member"]),
    "operator-admin": ("operatoradminpass", "operator", ["admin"]),
    "customer": ("customerpass", "customer", ["member"]),
    "customer2": ("customer2pass", "customer2", ["member"]),
    # privileged customer identity: its app cred is what the operator must refuse
    "customer-admin": ("customeradminpass", "customer", ["admin"]),
}
# key -> (user, app cred name, roles to delegate or None for "all roles of the user")
APP_CREDS = {
    "operator": ("operator", "operator-ac", ["member"]),
    "customer": ("customer", "customer-ac", ["member"]),
    "customer2": ("customer2", "customer2-ac", ["member"]),
    # no role list: the app cred carries every role the user has (admin, and
    # the implied member/reader) -> a "privileged" credential.
    "customer_priv": ("customer-admin", "customer-admin-ac", None),
}


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


def app_cred_token(ac_id, secret):
    body = {"auth": {"identity": {"methods": ["application_credential"],
                                  "application_credential": {"id": ac_id, "secret": secret}}}}
    r = check(requests.post(KS + "/auth/tokens", json=body, timeout=T),
              f"app cred token for {ac_id}")
    return r.json()["token"]


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


# ---- projects, users, roles --------------------------------------------------
# "admin", "member", "reader" come from keystone-manage bootstrap; "service" is ours.
roles = {n: ensure("roles", "role", n) for n in ("admin", "member", "reader", "service")}
proj = {n: ensure("projects", "project", n, {"domain_id": "default"}) for n in PROJECTS}
proj["admin"] = find("projects", name="admin")
users = {}
for name, (pw, p, rl) in USERS.items():
    users[name] = ensure("users", "user", name, {"domain_id": "default", "password": pw,
                                                 "default_project_id": proj[p]})
    for role in rl:
        grant(proj[p], users[name], roles[role])

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

# ---- application credentials ---------------------------------------------------
# Keystone only lets a user create app creds for itself, so each one is created
# with the owning user's own project-scoped token.
acs = {}
for key, (user, ac_name, ac_roles) in APP_CREDS.items():
    pw, p, _ = USERS[user]
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
    print(f"ks_setup: app cred {ac_name} ({user}@{p}) ok, token roles={got_roles}", file=sys.stderr)
    acs[key] = {"id": ac["id"], "secret": ac["secret"], "name": ac_name, "user": user}

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

out = {
    "admin": {**ADMIN, "project_id": proj["admin"]},
    "projects": proj,
    "users": {n: {"id": users[n], "password": USERS[n][0], "project": USERS[n][1]} for n in USERS},
    "app_creds": acs,
    "roles": roles,
}
path = os.path.join(os.environ["LAB"], "run", "keystone.json")
tmp = path + ".tmp"
with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
    json.dump(out, f, indent=1)
os.replace(tmp, path)
print(f"ks_setup: wrote {path}", file=sys.stderr)
