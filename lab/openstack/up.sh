#!/usr/bin/env bash
# Real OpenStack test lab for bnerd-vpn-operator: Keystone 30 + Neutron 29 API on loopback.
#
#   MariaDB (Debian package, private datadir)  127.0.0.1:3307
#   Keystone (PyPI, gunicorn)                  127.0.0.1:5000   -> /v3
#   Neutron API (PyPI, gunicorn)               127.0.0.1:9696   -> /v2.0
#   TLS-terminating proxy (socat, lab CA)      127.0.0.1:15000 -> Keystone, 127.0.0.1:19696 -> Neutron;
#                                              Keystone's catalog lists the latter as region RegionTLS
#   No agents, no RabbitMQ (transport_url = fake:/), ML2 without mechanism drivers, L3 router plugin:
#   the API and DB semantics (ports, fixed IPs, routers, extra routes, tags, RBAC, quotas) are real,
#   no packets flow.
#   ovn.sh: a third Neutron, ML2/OVN, 127.0.0.1:9698, region RegionOVN, with OVN NB/SB, northd
#   and a userspace data plane (ovs-vswitchd netdev + ovn-controller): packets flow there.
#   older.sh: an older Neutron, release 2025.1 (neutron 26), API only, 127.0.0.1:9699, region
#   Region2025, its own venv and database: the parity table's column for clouds a release behind.
#
# Usage:   bash lab/openstack/up.sh            (prints the path of lab.env as its last stdout line;
#                                               progress goes to stderr)
#          . "$(bash lab/openstack/up.sh)"     (source the env in one go)
#          bash lab/openstack/down.sh
# Knobs:   LAB=<dir>                 state dir (default $HOME/.cache/bnerd-vpn-operator/oslab)
#          OSLAB_VENV=<dir>          venv (default $HOME/.cache/bnerd-vpn-operator/oslab-venv-<sha12 of constraints.txt>)
#          OSLAB_PYTHON=<python3>    interpreter used to create the venv (default python3)
#          OSLAB_NEUTRON_WORKERS=2   gunicorn workers for Neutron (each has 8 threads)
#          OSLAB_KEYSTONE_WORKERS=1  gunicorn workers for Keystone (8 threads; its cache is in-process)
#          OSLAB_KEEP_ON_FAILURE=1   do not stop half-started services when up.sh fails
#
# Behaviour: if the lab recorded in $LAB/run is already up and healthy, this only re-ensures
# quotas/fabric, rewrites lab.env + clouds.yaml and exits 0 (a second caller costs ~2 s).
# Otherwise it stops leftovers of a previous run (via down.sh), wipes $LAB/var and starts from
# an empty database.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
CACHE=$HOME/.cache/bnerd-vpn-operator
export LAB=${LAB:-$CACHE/oslab}
CONSTRAINTS=$HERE/constraints.txt
# The venv lives outside $LAB and outside the clone, keyed by the constraints content: it
# survives down/up and fresh clones, and a changed constraints.txt gets a new venv.
VENV=${OSLAB_VENV:-$CACHE/oslab-venv-$(sha256sum "$CONSTRAINTS" | cut -c1-12)}
ETC=$LAB/etc VAR=$LAB/var RUN=$LAB/run LOG=$LAB/log
MYSQL_SOCK=$VAR/mysql/mysqld.sock
export PYTHONWARNINGS=ignore
# A role that is cloud admin only by the lab's Neutron policy (write_neutron_policy below):
# ks_setup.py gives it to customer-netop, whose app cred is LAB_CUSTOMER_POLICYPRIV_AC_*.
export OSLAB_POLICY_PRIV_ROLE=net_operator
# The HTTPS endpoint: a TLS-terminating proxy in front of Keystone and Neutron, with a CA made
# for this lab (its files under $VAR, so a fresh start makes a new one). ks_setup.py registers
# the proxied Neutron as region OSLAB_TLS_REGION; neutron_setup.py writes LAB_TLS_* to lab.env.
export OSLAB_TLS_DIR=$VAR/tls OSLAB_TLS_KEYSTONE_PORT=15000 OSLAB_TLS_NEUTRON_PORT=19696 \
  OSLAB_TLS_REGION=RegionTLS
mkdir -p "$LAB" "$RUN" "$LOG"

t0=$(date +%s%N)
ts() { printf '[oslab up %5.1fs] %s\n' "$(( ($(date +%s%N) - t0) / 1000000 ))e-3" "$*" >&2; }
http_code() { curl -m 5 -s -o /dev/null -w '%{http_code}' "$1" 2>/dev/null || true; }
pid_alive() { [ -s "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
die() { # message [log file to show the tail of]
  echo "oslab up: ERROR: $1" >&2
  if [ -n "${2:-}" ] && [ -f "$2" ]; then echo "---- tail $2" >&2; tail -n 30 "$2" >&2; fi
  exit 1
}
wait_http() { # url expected_code timeout_s pidfile-name: poll, but fail early if the server died
  local end=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    [ "$(http_code "$1")" = "$2" ] && return 0
    if [ -s "$RUN/$4.pid" ] && ! pid_alive "$4"; then return 1; fi
    sleep 0.3
  done
  return 1
}

# Neutron's one policy override, as operators customise it: another role counts as cloud admin
# (context_is_admin also makes Neutron's context.is_admin true: unscoped queries, and every
# rule:admin_only of the new defaults). Only OSLAB_POLICY_PRIV_ROLE is added, which no other
# user holds, so nobody else's answers change. oslo.policy re-reads the file when its mtime
# changes (no restart needed); it is replaced atomically, and only when its content differs,
# so a worker never reads half a file and an unchanged file costs no reload.
write_neutron_policy() {
  local f=$ETC/neutron/policy.yaml
  mkdir -p "$ETC/neutron"
  printf '%s\n' "# written by lab/openstack/up.sh" \
    "\"context_is_admin\": \"role:admin or role:$OSLAB_POLICY_PRIV_ROLE\"" >"$f.tmp"
  if cmp -s "$f.tmp" "$f"; then rm -f "$f.tmp"; else mv -f "$f.tmp" "$f"; fi
}

# The lab's CA and a server certificate for 127.0.0.1 and localhost, unless a pair that
# verifies is there already. EC P-256 and the extensions webpki (rustls) insists on: a v3 CA
# with keyCertSign, a leaf that is no CA, with the names in subjectAltName and serverAuth.
TLS=$OSLAB_TLS_DIR
make_tls_certs() {
  if [ -s "$TLS/ca.pem" ] && [ -s "$TLS/server.key" ] &&
    openssl verify -CAfile "$TLS/ca.pem" "$TLS/server.pem" >/dev/null 2>&1; then
    return 0
  fi
  rm -rf "$TLS" && mkdir -p "$TLS" && (
    cd "$TLS"
    printf '%s\n' '[req]' 'distinguished_name = dn' '[dn]' '[ca]' \
      'basicConstraints = critical, CA:TRUE' 'keyUsage = critical, keyCertSign, cRLSign' \
      'subjectKeyIdentifier = hash' >ca.cnf
    printf '%s\n' 'basicConstraints = critical, CA:FALSE' 'keyUsage = critical, digitalSignature' \
      'extendedKeyUsage = serverAuth' 'subjectAltName = IP:127.0.0.1, DNS:localhost' \
      'subjectKeyIdentifier = hash' 'authorityKeyIdentifier = keyid' >server.ext
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -config ca.cnf -extensions ca -subj "/CN=bnerd-vpn-operator lab CA $(date +%s)" \
      -keyout ca.key -out ca.pem &&
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -config ca.cnf \
      -subj /CN=127.0.0.1 -keyout server.key -out server.csr &&
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile server.ext -out server.pem &&
    openssl verify -CAfile ca.pem server.pem
  ) >"$LOG/tls-certs.log" 2>&1 || return 1
  TLS_CERTS_NEW=1
}
https_code() { curl -m 5 -s -o /dev/null -w '%{http_code}' --cacert "$TLS/ca.pem" "$1" 2>/dev/null || true; }
# socat terminates TLS and hands the bytes to the plain server: no X-Forwarded-* header, so
# Neutron builds its paging links from the Host it is sent and its own scheme, http://, as
# behind many a real cloud's proxy. One process per connection (fork), all in the daemon's
# process group, which down.sh stops as a whole. nodelay on both sides: gunicorn writes an
# answer's head and body apart, and with Nagle the second waits for the client's delayed ACK
# (measured: 10 keep-alive GETs 2.0 s without, 0.4 s with).
tls_proxy_cmd() { # listen-port upstream-port
  TLS_PROXY_CMD=(socat -d "OPENSSL-LISTEN:$1,bind=127.0.0.1,reuseaddr,fork,nodelay,verify=0,cert=$TLS/server.pem,key=$TLS/server.key"
    "TCP:127.0.0.1:$2,nodelay")
}
start_tls_proxy() { # name listen-port upstream-port
  tls_proxy_cmd "$2" "$3"
  setsid nohup "${TLS_PROXY_CMD[@]}" </dev/null >"$LOG/$1.log" 2>&1 9>&- &
  echo $! >"$RUN/$1.pid"
}
# The recorded proxy runs the command this up.sh would start (an older one is replaced).
tls_proxy_current() { # name listen-port upstream-port
  local pid
  pid_alive "$1" || return 1
  pid=$(tr -dc 0-9 <"$RUN/$1.pid")
  tls_proxy_cmd "$2" "$3"
  [ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" = "${TLS_PROXY_CMD[*]} " ]
}
stop_tls_proxy() { # name: only the recorded pid, only if it still is socat
  local pid
  pid=$(tr -dc 0-9 2>/dev/null <"$RUN/$1.pid" || true)
  if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q socat; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$RUN/$1.pid"
}
# Both proxies answering through the lab CA, or started (again) without touching Keystone or
# Neutron: a lab started before the proxy existed gains it while other tests use it.
ensure_tls_proxy() {
  TLS_CERTS_NEW=0
  make_tls_certs || { echo "oslab up: making the lab CA failed (see $LOG/tls-certs.log)" >&2; return 1; }
  local spec name port upstream path code
  for spec in "tls-keystone $OSLAB_TLS_KEYSTONE_PORT 5000 /v3 200" \
    "tls-neutron $OSLAB_TLS_NEUTRON_PORT 9696 /v2.0/networks 401"; do
    read -r name port upstream path code <<<"$spec"
    if [ "$TLS_CERTS_NEW" = 0 ] && tls_proxy_current "$name" "$port" "$upstream" &&
      [ "$(https_code "https://127.0.0.1:$port$path")" = "$code" ]; then
      continue
    fi
    stop_tls_proxy "$name"
    if port_busy "$port"; then
      echo "oslab up: 127.0.0.1:$port is in use by a process this lab did not record" >&2
      return 1
    fi
    start_tls_proxy "$name" "$port" "$upstream"
    local end=$(( $(date +%s) + 20 ))
    until [ "$(https_code "https://127.0.0.1:$port$path")" = "$code" ]; do
      if ! pid_alive "$name" || [ "$(date +%s)" -ge "$end" ]; then
        echo "oslab up: TLS proxy $name on 127.0.0.1:$port did not answer $code on $path" >&2
        tail -n 20 "$LOG/$name.log" >&2
        return 1
      fi
      sleep 0.2
    done
    ts "TLS proxy https://127.0.0.1:$port -> 127.0.0.1:$upstream (pid $(cat "$RUN/$name.pid"))"
  done
}

# Serialise concurrent callers (e.g. two test processes calling up.sh at once). The lock fd
# is closed (9>&-) for every daemon started below, otherwise they would hold it forever.
exec 9>"$LAB/up.lock"
flock -w 900 9 || die "could not get $LAB/up.lock within 900 s"

# On failure stop what this run started, so no half-started lab keeps the ports busy.
cleanup_on_failure() {
  local rc=$?
  if [ $rc -ne 0 ] && [ "${OSLAB_KEEP_ON_FAILURE:-0}" != 1 ] && [ "${STARTED:-0}" = 1 ]; then
    echo "oslab up: failed (rc=$rc), stopping what was started; logs in $LOG" >&2
    bash "$HERE/down.sh" >&2 || true
  fi
}
trap cleanup_on_failure EXIT

# ---- 0. OS packages ---------------------------------------------------------------------------
need=()
command -v curl >/dev/null || need+=(curl)
command -v openssl >/dev/null || need+=(openssl)
command -v socat >/dev/null || need+=(socat)
{ command -v mariadbd || [ -x /usr/sbin/mariadbd ]; } >/dev/null || need+=(mariadb-server mariadb-client)
# The ML2/OVN Neutron's backend and data plane (ovn.sh), and the tools of the packet tests.
command -v ovn-northd >/dev/null || need+=(ovn-central)
command -v ovn-controller >/dev/null || need+=(ovn-host)
command -v ovs-vswitchd >/dev/null || need+=(openvswitch-switch)
command -v ping >/dev/null || need+=(iputils-ping)
command -v ip >/dev/null || need+=(iproute2)
# Checksum offload off on the endpoints' veths: TCP through the userspace datapath needs it.
command -v ethtool >/dev/null || need+=(ethtool)
PY=${OSLAB_PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ] && ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  need+=(python3-venv); PY=/usr/bin/python3   # Debian's python3 needs python3-venv for ensurepip
fi
if [ ${#need[@]} -gt 0 ]; then
  ts "apt-get install ${need[*]}"
  # test.sh builds the image (which installs its own packages) while this runs: wait for
  # dpkg's lock rather than fail on it.
  apt-get -o DPkg::Lock::Timeout=900 update -qq >"$LOG/apt.log" 2>&1 || die "apt-get update failed" "$LOG/apt.log"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${need[@]}" \
    >>"$LOG/apt.log" 2>&1 || die "apt-get install failed" "$LOG/apt.log"
fi
MARIADBD=$(command -v mariadbd || echo /usr/sbin/mariadbd)
MARIADB_INSTALL_DB=$(command -v mariadb-install-db || echo /usr/bin/mariadb-install-db)

# ---- 1. already up? ------------------------------------------------------------------------
lab_healthy_but_ovn() {
  pid_alive mariadb && pid_alive keystone && pid_alive neutron && pid_alive neutron-tagged &&
    [ "$(http_code http://127.0.0.1:9696/v2.0/networks)" = 401 ] && [ -s "$RUN/keystone.json" ] &&
    [ "$(cat "$RUN/venv.path" 2>/dev/null)" = "$VENV" ] && [ -x "$VENV/bin/python" ]
}
lab_healthy() {
  pid_alive mariadb && pid_alive keystone && pid_alive neutron && pid_alive neutron-tagged &&
    [ "$(http_code http://127.0.0.1:9697/v2.0/networks)" = 401 ] &&
    [ "$(http_code http://127.0.0.1:5000/v3)" = 200 ] &&
    [ "$(http_code http://127.0.0.1:9696/v2.0/networks)" = 401 ] &&   # 401: authtoken is wired
    [ -s "$RUN/keystone.json" ] && [ "$(cat "$RUN/venv.path" 2>/dev/null)" = "$VENV" ] &&
    [ -x "$VENV/bin/python" ] && bash "$HERE/ovn.sh" healthy && bash "$HERE/older.sh" healthy
}
# The ML2/OVN Neutron alone is restarted when it is all that is missing (a lab started before
# it existed gains it; the other services and their data stay).
# The same for the older Neutron (older.sh).
if ! lab_healthy && lab_healthy_but_ovn; then
  bash "$HERE/ovn.sh" up 9>&- || die "the ML2/OVN Neutron did not start"
  bash "$HERE/older.sh" up 9>&- || die "the older Neutron did not start (lab/openstack/older.sh)"
fi
if lab_healthy; then
  # A lab started before the policy-privileged identity existed gains it here; no other app
  # cred is re-created (running tests hold their secrets).
  if write_neutron_policy &&
    "$VENV/bin/python" "$HERE/ks_setup.py" --ensure-policy-priv 2>"$LOG/ks_setup_ensure.log" &&
    "$VENV/bin/python" "$HERE/neutron_setup.py" 2>"$LOG/neutron_setup.log"; then
    # A proxy that cannot be (re)started fails this run, and leaves Keystone and Neutron be:
    # tests of everyone else are using them. lab.env already names the TLS endpoint, so the
    # TLS tests fail on it, loudly.
    ensure_tls_proxy || die "the TLS proxy is not answering; Keystone and Neutron are left running"
    ts "lab already up and healthy; rewrote $RUN/lab.env"
    echo "$RUN/lab.env"
    exit 0
  fi
  ts "lab answers but setup check failed (see $LOG/ks_setup_ensure.log, $LOG/neutron_setup.log); restarting it"
fi
if ls "$RUN"/*.pid >/dev/null 2>&1; then
  ts "stopping leftovers of a previous run"
  bash "$HERE/down.sh" >&2
fi
for p in 3307 5000 9696 9697 "$OSLAB_TLS_KEYSTONE_PORT" "$OSLAB_TLS_NEUTRON_PORT"; do
  port_busy $p && die "127.0.0.1:$p is in use by a process this lab did not record (another lab with a different LAB=?)"
done
rm -f "$RUN/lab.env" "$RUN/clouds.yaml" "$RUN/keystone.json" "$RUN/venv.path"

# ---- 2. Python venv (cached) ----------------------------------------------------------------
# The older Neutron's venv (older.sh) is built beside it: both mostly wait on downloads.
mkdir -p "$LOG"
bash "$HERE/older.sh" venv >"$LOG/older-venv.log" 2>&1 9>&- &
OLDER_VENV_PID=$!
# A marker file is written last, so an interrupted install is detected and redone. The flock
# keeps two labs (different LAB dirs) from building the same venv at the same time.
(
  exec 8>"$VENV.lock"; flock -w 900 8 || exit 1
  if [ ! -f "$VENV/.oslab-complete" ]; then
    rm -rf "$VENV"
    echo "oslab up: building venv $VENV (pip, ~1 min)" >&2
    "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip >"$LOG/pip.log" 2>&1
    "$VENV/bin/pip" install -q -c "$CONSTRAINTS" keystone neutron python-openstackclient \
      gunicorn PyMySQL requests PyYAML >>"$LOG/pip.log" 2>&1
    touch "$VENV/.oslab-complete"
  fi
) 9>&- || die "venv build failed" "$LOG/pip.log"
ts "venv ok: $VENV"

# ---- 3. fresh state + config files ----------------------------------------------------------
rm -rf "$VAR"
mkdir -p "$ETC/keystone" "$ETC/neutron/plugins/ml2" "$VAR/keystone/fernet-keys" \
  "$VAR/keystone/credential-keys" "$VAR/neutron/lock" "$VAR/mysql"
ME=$(id -un) MYGROUP=$(id -gn)

# MariaDB runs as the invoking user: $LAB is under $HOME, which the "mysql" user usually cannot
# traverse (/root is 0700). Durability settings are off: this DB is thrown away on every start.
cat >"$ETC/my.cnf" <<EOF
[mysqld]
user = $ME
datadir = $VAR/mysql/data
socket = $MYSQL_SOCK
pid-file = $VAR/mysql/mariadb.pid
bind-address = 127.0.0.1
port = 3307
skip-name-resolve
log-error = $VAR/mysql/error.log
innodb_flush_log_at_trx_commit = 0
innodb_buffer_pool_size = 256M
sync_binlog = 0
performance_schema = OFF
character-set-server = utf8mb4
collation-server = utf8mb4_general_ci
max_connections = 500
EOF

cat >"$ETC/keystone/keystone.conf" <<EOF
[DEFAULT]
log_dir = $LOG
log_file = keystone.log
[database]
connection = mysql+pymysql://os:ospass@127.0.0.1:3307/keystone?charset=utf8mb4
[token]
provider = fernet
# long-lived tokens: test runs may keep one token for their whole duration
expiration = 86400
[fernet_tokens]
key_repository = $VAR/keystone/fernet-keys
[credential]
key_repository = $VAR/keystone/credential-keys
[identity]
# minimum bcrypt cost: the default (12) makes every password auth ~0.5 s of CPU
password_hash_rounds = 4
# Keystone's own cache, as clouds run it (there with memcached): role assignments, projects
# and roles are read once, not on every token issue and validation. In-process memory is
# coherent only within one process, hence one Keystone worker (OSLAB_KEYSTONE_WORKERS): an
# invalidation (a deleted application credential, a removed role) is seen by every request.
[cache]
enabled = true
backend = dogpile.cache.memory
EOF

# Neutron 29 has no neutron-server binary: the API is only a WSGI app (neutron.wsgi.api), so
# concurrency comes from gunicorn (workers x threads), not from api_workers (kept for clarity).
cat >"$ETC/neutron/neutron.conf" <<EOF
[DEFAULT]
core_plugin = ml2
service_plugins = router
auth_strategy = keystone
transport_url = fake:/
allow_overlapping_ips = true
api_paste_config = $ETC/neutron/api-paste.ini
state_path = $VAR/neutron
host = oslab
log_dir = $LOG
log_file = neutron.log
debug = false
notify_nova_on_port_status_changes = false
notify_nova_on_port_data_changes = false
dhcp_agent_notification = false
rpc_workers = 0
rpc_state_report_workers = 0
api_workers = ${OSLAB_NEUTRON_WORKERS:-2}
[database]
connection = mysql+pymysql://os:ospass@127.0.0.1:3307/neutron?charset=utf8mb4
max_pool_size = 20
max_overflow = 40
[keystone_authtoken]
www_authenticate_uri = http://127.0.0.1:5000
auth_url = http://127.0.0.1:5000
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = neutron
password = neutronpass
service_token_roles_required = true
[oslo_concurrency]
lock_path = $VAR/neutron/lock
[oslo_policy]
enforce_scope = true
enforce_new_defaults = true
policy_file = $ETC/neutron/policy.yaml
[nova]
auth_url = http://127.0.0.1:5000
auth_type = password
project_domain_name = Default
user_domain_name = Default
region_name = RegionOne
project_name = service
username = neutron
password = neutronpass
EOF

cat >"$ETC/neutron/plugins/ml2/ml2_conf.ini" <<EOF
[ml2]
type_drivers = local,flat,vxlan
tenant_network_types = local
mechanism_drivers =
extension_drivers = port_security
[ml2_type_flat]
flat_networks = *
[ml2_type_vxlan]
vni_ranges = 1000:1999
EOF
# A second API process on the same database, differing only in ML2's extension drivers: with
# tag_ports_during_bulk_creation Neutron keeps `tags` sent in a port's create body. The main API
# (9696) has the common default (dropped); this one (9697) shows the other kind of cloud.
sed 's/^extension_drivers = port_security$/extension_drivers = port_security,tag_ports_during_bulk_creation/' \
  "$ETC/neutron/plugins/ml2/ml2_conf.ini" >"$ETC/neutron/plugins/ml2/ml2_conf_tagged.ini"
cp "$VENV/etc/neutron/api-paste.ini" "$ETC/neutron/api-paste.ini"
write_neutron_policy

# Keystone and Neutron parse sys.argv with oslo.config at import time; under gunicorn that is
# gunicorn's argv and the workers die with exit code 2. Hide it from them.
printf 'import sys\nsys.argv = sys.argv[:1]\nfrom keystone.wsgi.api import application  # noqa\n' >"$LAB/wsgi_keystone.py"
printf 'import sys\nsys.argv = sys.argv[:1]\nfrom neutron.wsgi.api import application  # noqa\n' >"$LAB/wsgi_neutron.py"
echo "$VENV" >"$RUN/venv.path"
ts "config written to $ETC"

# ---- 4. MariaDB --------------------------------------------------------------------------------
# Daemons are started with setsid (own session + process group, so a Ctrl-C or a harness killing
# the caller's process group does not take them down; down.sh can kill the whole group) and
# nohup, with stdin from /dev/null and the lock fd closed. $! is the daemon's own pid.
# gunicorn >= 27 opens a control socket at $HOME/.gunicorn/gunicorn.ctl by default: one path shared
# by both servers (and any other gunicorn of the user), and closing it adds seconds to shutdown,
# hence --no-control-socket. Keystone/Neutron workers linger after "Worker exiting" until the master
# SIGKILLs them at --graceful-timeout, so that is kept short (2 s) to make down.sh fast.
STARTED=1
"$MARIADB_INSTALL_DB" --defaults-file="$ETC/my.cnf" --user="$ME" --auth-root-authentication-method=normal \
  --skip-test-db >"$LOG/mariadb-install.log" 2>&1 || die "mariadb-install-db failed" "$LOG/mariadb-install.log"
setsid nohup "$MARIADBD" --defaults-file="$ETC/my.cnf" </dev/null >"$LOG/mariadb.out" 2>&1 9>&- &
echo $! >"$RUN/mariadb.pid"
end=$(( $(date +%s) + 60 ))
until mariadb-admin --socket="$MYSQL_SOCK" -uroot ping >/dev/null 2>&1; do
  pid_alive mariadb && [ "$(date +%s)" -lt "$end" ] || die "mariadb did not start" "$VAR/mysql/error.log"
  sleep 0.3
done
mariadb --socket="$MYSQL_SOCK" -uroot -e "
  CREATE DATABASE keystone CHARACTER SET utf8mb4;
  CREATE DATABASE neutron CHARACTER SET utf8mb4;
  CREATE USER 'os'@'127.0.0.1' IDENTIFIED BY 'ospass';
  GRANT ALL ON keystone.* TO 'os'@'127.0.0.1'; GRANT ALL ON neutron.* TO 'os'@'127.0.0.1';"
ts "mariadb up on 127.0.0.1:3307 (pid $(cat "$RUN/mariadb.pid"))"

# ---- 4b. the ML2/OVN Neutron (ovn.sh), in the background -----------------------------------------
# It needs only MariaDB and the venv until a request comes; neutron_setup.py waits for it.
bash "$HERE/ovn.sh" up >"$LOG/ovn-up.log" 2>&1 9>&- &
OVN_PID=$!
# The older Neutron (older.sh) likewise: its venv, MariaDB and the lab's Neutron config.
wait "$OLDER_VENV_PID" || die "the older Neutron's venv build failed" "$LOG/older-venv.log"
bash "$HERE/older.sh" up >"$LOG/older-up.log" 2>&1 9>&- &
OLDER_PID=$!

# ---- 5. Neutron DB migration, in the background -------------------------------------------------
# It is the slowest step and independent of Keystone, so it overlaps with the Keystone setup.
"$VENV/bin/neutron-db-manage" --config-file "$ETC/neutron/neutron.conf" \
  --config-file "$ETC/neutron/plugins/ml2/ml2_conf.ini" upgrade heads \
  >"$LOG/neutron-db-manage.log" 2>&1 9>&- &
NDB_PID=$!

# ---- 6. Keystone --------------------------------------------------------------------------------
KM=("$VENV/bin/keystone-manage" --config-file "$ETC/keystone/keystone.conf")
{
  "${KM[@]}" db_sync &&
  "${KM[@]}" fernet_setup --keystone-user "$ME" --keystone-group "$MYGROUP" &&
  "${KM[@]}" credential_setup --keystone-user "$ME" --keystone-group "$MYGROUP" &&
  "${KM[@]}" bootstrap --bootstrap-password adminpass --bootstrap-username admin \
    --bootstrap-project-name admin --bootstrap-role-name admin --bootstrap-service-name keystone \
    --bootstrap-region-id RegionOne --bootstrap-admin-url http://127.0.0.1:5000/v3 \
    --bootstrap-public-url http://127.0.0.1:5000/v3 --bootstrap-internal-url http://127.0.0.1:5000/v3
} >"$LOG/keystone-manage.log" 2>&1 || die "keystone-manage failed" "$LOG/keystone-manage.log"
ts "keystone db_sync + bootstrap done"
OS_KEYSTONE_CONFIG_DIR=$ETC/keystone setsid nohup "$VENV/bin/gunicorn" --chdir "$LAB" \
  --bind 127.0.0.1:5000 --workers "${OSLAB_KEYSTONE_WORKERS:-1}" --threads 8 --timeout 120 --graceful-timeout 2 --no-control-socket \
  --pid "$RUN/keystone.pid" --access-logfile "$LOG/keystone-access.log" \
  --error-logfile "$LOG/keystone-gunicorn.log" wsgi_keystone:application \
  </dev/null >"$LOG/keystone.out" 2>&1 9>&- &
echo $! >"$RUN/keystone.pid"   # gunicorn rewrites it with the same (master) pid
wait_http http://127.0.0.1:5000/v3 200 90 keystone || die "keystone did not answer" "$LOG/keystone-gunicorn.log"
ts "keystone answering on 127.0.0.1:5000 (pid $(cat "$RUN/keystone.pid"))"
"$VENV/bin/python" "$HERE/ks_setup.py" 2>"$LOG/ks_setup.log" || die "ks_setup.py failed" "$LOG/ks_setup.log"
ts "keystone projects/users/app creds created"

# ---- 7. Neutron ---------------------------------------------------------------------------------
wait "$NDB_PID" || die "neutron-db-manage failed" "$LOG/neutron-db-manage.log"
ts "neutron db migrated"
start_neutron() { # name port ml2-config workers threads
  OS_NEUTRON_CONFIG_DIR=$ETC/neutron OS_NEUTRON_CONFIG_FILES="neutron.conf;plugins/ml2/$3" \
    setsid nohup "$VENV/bin/gunicorn" --chdir "$LAB" --bind "127.0.0.1:$2" \
    --workers "$4" --threads "$5" --timeout 120 --graceful-timeout 2 --no-control-socket \
    --pid "$RUN/$1.pid" --access-logfile "$LOG/$1-access.log" \
    --error-logfile "$LOG/$1-gunicorn.log" wsgi_neutron:application \
    </dev/null >"$LOG/$1.out" 2>&1 9>&- &
  echo $! >"$RUN/$1.pid"
}
start_neutron neutron 9696 ml2_conf.ini "${OSLAB_NEUTRON_WORKERS:-2}" 8
start_neutron neutron-tagged 9697 ml2_conf_tagged.ini 1 4
wait_http http://127.0.0.1:9696/ 200 120 neutron || die "neutron did not answer" "$LOG/neutron-gunicorn.log"
wait_http http://127.0.0.1:9696/v2.0/networks 401 60 neutron || die "neutron API not ready" "$LOG/neutron.log"
ts "neutron answering on 127.0.0.1:9696 (pid $(cat "$RUN/neutron.pid"))"
wait_http http://127.0.0.1:9697/v2.0/networks 401 120 neutron-tagged \
  || die "neutron (tag_ports_during_bulk_creation) did not answer" "$LOG/neutron-tagged-gunicorn.log"
ts "neutron with tag_ports_during_bulk_creation answering on 127.0.0.1:9697 (pid $(cat "$RUN/neutron-tagged.pid"))"

# ---- 8. the TLS proxy, quotas, demo fabric, lab.env, clouds.yaml -----------------------------------
ensure_tls_proxy || die "the TLS proxy did not start"
wait "$OVN_PID" || die "the ML2/OVN Neutron did not start (lab/openstack/ovn.sh)" "$LOG/ovn-up.log"
ts "$(grep -E 'answering|data plane' "$LOG/ovn-up.log" | sed 's/^\[oslab ovn *[0-9.]*s\] //' | paste -sd';' -)"
wait "$OLDER_PID" || die "the older Neutron did not start (lab/openstack/older.sh)" "$LOG/older-up.log"
ts "$(grep -E 'answering' "$LOG/older-up.log" | sed 's/^\[oslab 2025.1 *[0-9.]*s\] //')"
"$VENV/bin/python" "$HERE/neutron_setup.py" 2>"$LOG/neutron_setup.log" \
  || die "neutron_setup.py failed" "$LOG/neutron_setup.log"
ts "quotas + fabric done; lab up"
echo "$RUN/lab.env"
