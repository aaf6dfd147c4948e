#!/usr/bin/env python3
"""What the lab holds, as the cloud admin sees it across every project, in both of its
databases (the API-only Neutron's and the ML2/OVN Neutron's): networks, subnets, ports,
routers (with their route count) and RBAC policies; and the packet tests' network namespaces
(`bnl-*`) on this machine.

  census.py snapshot FILE   write the census to FILE
  census.py compare FILE    compare the lab now with FILE: every object made since is a
                            leftover (exit 1), every object gone since was removed by someone
                            who did not make it (exit 1), and every router whose routes
                            changed is named (exit 1)

test.sh takes a snapshot before the test tiers and compares after them, so a test that leaves
its fabric behind (or removes what it did not make) fails the run, and a lab that stays up does
not grow run after run. Reads LAB_* from the lab.env named by $BNERD_LAB_ENV.
"""
import json
import os
import subprocess
import sys

import requests

T = 60
KINDS = ("networks", "subnets", "ports", "routers", "rbac-policies")
ALL = KINDS + ("netns",)


def lab_env():
    path = os.environ.get("BNERD_LAB_ENV") or os.path.expanduser(
        "~/.cache/bnerd-vpn-operator/oslab/run/lab.env")
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                env[k] = v.strip().strip("'\"")
    return env


def admin_token(env):
    body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": env["LAB_ADMIN_USERNAME"], "domain": {"name": "Default"},
        "password": env["LAB_ADMIN_PASSWORD"]}}},
        "scope": {"project": {"name": env["LAB_ADMIN_PROJECT_NAME"],
                              "domain": {"name": "Default"}}}}}
    r = requests.post(env["LAB_KEYSTONE_URL"] + "/auth/tokens", json=body, timeout=T)
    r.raise_for_status()
    return r.headers["X-Subject-Token"]


def census():
    env = lab_env()
    tok = admin_token(env)
    out = {kind: {} for kind in KINDS}
    # Object IDs are UUIDs: the three databases' objects share one map per kind.
    for url in (env["LAB_NEUTRON_URL"], env["LAB_NEUTRON_OVN_URL"], env["LAB_NEUTRON_2025_URL"]):
        for kind in KINDS:
            r = requests.get(f"{url}/v2.0/{kind}", headers={"X-Auth-Token": tok}, timeout=T)
            r.raise_for_status()
            items = r.json()[kind.replace("-", "_")]
            out[kind].update({i["id"]: {
                "name": i.get("name") or i.get("object_id") or "",
                "project": i.get("project_id") or "",
                "routes": len(i.get("routes") or []),
            } for i in items})
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    out["netns"] = {n: {"name": n, "project": "", "routes": 0} for n in names if n.startswith("bnl-")}
    return out


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("snapshot", "compare"):
        sys.exit(__doc__)
    mode, path = sys.argv[1], sys.argv[2]
    now = census()
    if mode == "snapshot":
        with open(path, "w") as f:
            json.dump(now, f)
        print("lab census: " + ", ".join(f"{len(now[k])} {k}" for k in ALL))
        return
    with open(path) as f:
        before = json.load(f)
    bad = []
    for kind in ALL:
        b, a = before.get(kind, {}), now[kind]
        one = "netns" if kind == "netns" else kind[:-1]
        for i in sorted(set(a) - set(b)):
            bad.append(f"left behind: {one} {i} {a[i]['name']!r} (project {a[i]['project']})")
        for i in sorted(set(b) - set(a)):
            bad.append(f"removed by a test that did not make it: {one} {i} {b[i]['name']!r}")
        for i in sorted(set(a) & set(b)):
            if a[i]["routes"] != b[i]["routes"]:
                bad.append(f"routes changed: {one} {i} {a[i]['name']!r}: "
                           f"{b[i]['routes']} before, {a[i]['routes']} after")
    print("lab census: " + ", ".join(f"{len(now[k])} {k}" for k in ALL))
    for line in bad:
        print(line)
    if bad:
        print(f"lab hygiene: {len(bad)} difference(s) between the lab before and after the tests")
        sys.exit(1)
    print("lab hygiene: the lab holds exactly what it held before the tests")


main()
