#!/usr/bin/env python3
"""One Neutron call as the lab's cloud admin, for what the operator's client does not model
and the packet tests need: a port's port security and allowed address pairs.

    neutron_call.py <neutron url> <METHOD> <path under /v2.0> [json body]

Prints the answer's JSON on stdout; a non-2xx answer is exit 1 with the answer on stderr.
Run with the lab venv's python; reads $LAB/run/keystone.json (written by ks_setup.py).
"""
import json
import os
import sys

import requests

LAB = os.environ.get("LAB") or os.path.expanduser("~/.cache/bnerd-vpn-operator/oslab")
KS = "http://127.0.0.1:5000/v3"


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    url, method, path = sys.argv[1:4]
    body = json.loads(sys.argv[4]) if len(sys.argv) == 5 else None
    with open(os.path.join(LAB, "run", "keystone.json")) as f:
        adm = json.load(f)["admin"]
    auth = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": adm["username"], "domain": {"name": "Default"}, "password": adm["password"]}}},
        "scope": {"project": {"name": adm["project"], "domain": {"name": "Default"}}}}}
    r = requests.post(KS + "/auth/tokens", json=auth, timeout=30)
    if r.status_code != 201:
        sys.exit(f"admin token: HTTP {r.status_code} {r.text[:300]}")
    tok = r.headers["X-Subject-Token"]
    r = requests.request(method, url.rstrip("/") + "/v2.0" + path, json=body, timeout=60,
                         headers={"X-Auth-Token": tok})
    if not 200 <= r.status_code < 300:
        print(f"{method} {path}: HTTP {r.status_code} {r.text[:1000]}", file=sys.stderr)
        sys.exit(1)
    print(r.text if r.content else "{}")


main()
