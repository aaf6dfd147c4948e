#!/usr/bin/env bash
# The lab's third Neutron: ML2/OVN with a real (userspace) data plane, beside the two API-only
# Neutrons of up.sh, on its own database in the lab's MariaDB.
#
#   OVN Northbound / Southbound ovsdb-servers   127.0.0.1:6641 / 127.0.0.1:6642
#   ovn-northd                                  (unix sockets)
#   Neutron 29 API, ML2 `ovn` + `ovn-router`    127.0.0.1:9698 -> /v2.0, Keystone region RegionOVN
#   neutron-ovn-maintenance-worker              the OVN DB sync and periodic repairs
#   ovsdb-server (Open_vSwitch), ovs-vswitchd   br-int with datapath_type=netdev: no kernel module
#   ovn-controller                              chassis $OVN_CHASSIS, binds Neutron ports to veths
#
# Usage:   bash lab/openstack/ovn.sh up      (no-op when every process answers; else from scratch)
#          bash lab/openstack/ovn.sh down    (by the PIDs under $LAB/ovn/run only)
# Needs the lab's MariaDB and venv (up.sh starts this after MariaDB, before Keystone is set up).
# Pid files, sockets and databases live under $LAB/ovn, logs under $LAB/log/ovn.
#
# Two things cost a day each if unknown (docs/design.md, "The lab's Neutrons"):
# * Neutron reads its API worker count from uwsgi, mod_wsgi or ASGI_WORKERS only. Under gunicorn
#   it finds none, every OVN event handler fails ("The Neutron API workers count is zero") and
#   no port ever goes ACTIVE: gunicorn is started with ASGI_WORKERS.
# * Neutron 29 runs the OVN DB sync and its repairs only in neutron-ovn-maintenance-worker, a
#   process of its own.
set -euo pipefail
HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
LAB=${LAB:-$HOME/.cache/bnerd-vpn-operator/oslab}
O=$LAB/ovn
ORUN=$O/run OVAR=$O/var OETC=$O/etc OLOG=$LAB/log/ovn
NEUTRON_PORT=9698 NB_PORT=6641 SB_PORT=6642
OVN_CHASSIS=${OVN_CHASSIS:-bnerd-lab-chassis}
OVN_WORKERS=${OSLAB_NEUTRON_WORKERS:-2}
export OVS_RUNDIR=$ORUN OVS_LOGDIR=$OLOG OVS_DBDIR=$OVAR/ovs OVN_RUNDIR=$ORUN OVN_LOGDIR=$OLOG OVN_DBDIR=$OVAR/ovn
export PYTHONWARNINGS=ignore
NBDB=unix:$ORUN/ovnnb_db.sock SBDB=unix:$ORUN/ovnsb_db.sock OVSDB=unix:$ORUN/ovs-db.sock
t0=$(date +%s%N)
exec 4>&2
ts() { printf '[oslab ovn %5.1fs] %s\n' "$(( ($(date +%s%N) - t0) / 1000000 ))e-3" "$*" >&4; }
die() { { echo "oslab ovn: ERROR: $1"; [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 30 "$2"; } >&4; exit 1; }
http_code() { curl -m 5 -s -o /dev/null -w '%{http_code}' "$1" 2>/dev/null || true; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
alive() { [ -s "$ORUN/$1.pid" ] && kill -0 "$(tr -dc 0-9 <"$ORUN/$1.pid")" 2>/dev/null; }
PROCS=(ovnnb_db ovnsb_db ovn-northd neutron-ovn neutron-ovn-maintenance ovsdb-server-ovs ovs-vswitchd ovn-controller)

stop() { # pidfile-name expected-cmdline-substring [group]: never by name, only our own PID
  local f=$ORUN/$1.pid pid
  [ -s "$f" ] || return 0
  pid=$(tr -dc 0-9 <"$f")
  # The command line read whole first: `tr | grep -q` under pipefail fails when grep quits early.
  local cmd
  cmd=$( [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
  if [ -n "$pid" ] && [[ $cmd == *"$2"* ]]; then
    if [ "${3:-}" = group ]; then kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"; else kill -TERM "$pid"; fi
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      if [ "${3:-}" = group ]; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"; else kill -KILL "$pid"; fi
    fi
    echo "ovn: stopped $1 ($pid)" >&2
  fi
  rm -f "$f"
}

down() {
  # The tests' endpoints (netns bnl-*, veths bnl-*) first: they die with the bridge anyway,
  # but a namespace outlives every process.
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^bnl-' || true); do ip netns del "$ns" 2>/dev/null || true; done
  for ns in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^bnl-' || true); do ip link del "$ns" 2>/dev/null || true; done
  stop ovn-controller ovn-controller
  stop ovs-vswitchd ovs-vswitchd
  stop ovsdb-server-ovs ovsdb-server
  stop neutron-ovn-maintenance neutron-ovn-maintenance-worker group
  local gpid
  gpid=$( [ -s "$ORUN/neutron-ovn.pid" ] && tr -dc 0-9 <"$ORUN/neutron-ovn.pid" || true)
  stop neutron-ovn gunicorn group
  # Neutron's WSGI workers leave /tmp/neutron_start_time<master pid> and neutron_first_worker<pid>
  [ -n "$gpid" ] && rm -f "/tmp/neutron_start_time$gpid" "/tmp/neutron_first_worker$gpid"
  stop ovn-northd ovn-northd
  stop ovnnb_db ovsdb-server
  stop ovnsb_db ovsdb-server
}

healthy() {
  local p
  for p in "${PROCS[@]}"; do alive "$p" || return 1; done
  [ "$(http_code "http://127.0.0.1:$NEUTRON_PORT/v2.0/networks")" = 401 ] &&
    ovn-sbctl --db="$SBDB" --bare --columns=name find Chassis name="$OVN_CHASSIS" 2>/dev/null | grep -q .
}

up() {
  local venv sock lab_etc
  venv=$(cat "$LAB/run/venv.path")
  sock=$LAB/var/mysql/mysqld.sock
  lab_etc=$LAB/etc/neutron
  if healthy; then ts "ML2/OVN Neutron and data plane already up"; return 0; fi
  down
  for p in $NEUTRON_PORT $NB_PORT $SB_PORT; do
    port_busy "$p" && die "127.0.0.1:$p is in use by a process this lab did not record"
  done
  rm -rf "$O" "$OLOG" && mkdir -p "$ORUN" "$OVAR/ovn" "$OVAR/ovs" "$OVAR/neutron/lock" "$OETC/plugins/ml2" "$OLOG"
  # The daemons' start-up lines ("opened log file ...") go to a log, not to the caller.
  exec 4>&2 2>>"$OLOG/start.log"

  # ---- OVN central: NB + SB ovsdb-servers, northd ----
  local db port
  for db in nb sb; do
    port=$([ $db = nb ] && echo $NB_PORT || echo $SB_PORT)
    ovsdb-tool create "$OVAR/ovn/ovn${db}_db.db" "/usr/share/ovn/ovn-$db.ovsschema"
    ovsdb-server --detach --no-chdir --pidfile="$ORUN/ovn${db}_db.pid" \
      --unixctl="$ORUN/ovn${db}_db.ctl" --log-file="$OLOG/ovsdb-server-$db.log" \
      --remote="punix:$ORUN/ovn${db}_db.sock" --remote="ptcp:$port:127.0.0.1" \
      "$OVAR/ovn/ovn${db}_db.db" 9>&-
  done
  ovn-nbctl --db="$NBDB" init
  ovn-sbctl --db="$SBDB" init
  ovn-northd --detach --no-chdir --pidfile="$ORUN/ovn-northd.pid" --unixctl="$ORUN/ovn-northd.ctl" \
    --log-file="$OLOG/ovn-northd.log" --ovnnb-db="$NBDB" --ovnsb-db="$SBDB" 9>&-
  ts "OVN NB (tcp:127.0.0.1:$NB_PORT), SB (tcp:127.0.0.1:$SB_PORT), $(ovn-northd --version | head -1)"

  # ---- the database, in the lab's MariaDB, for the lab's DB user ----
  mariadb --socket="$sock" -uroot -e "
    DROP DATABASE IF EXISTS neutron_ovn;
    CREATE DATABASE neutron_ovn CHARACTER SET utf8mb4;
    GRANT ALL ON neutron_ovn.* TO 'os'@'127.0.0.1';"

  # ---- config: the lab's Neutron config with what ML2/OVN needs changed ----
  # Same Keystone, same policy file (the lab's one override), its own database and state.
  sed -e "s|^service_plugins = .*|service_plugins = ovn-router|" \
    -e "s|^state_path = .*|state_path = $OVAR/neutron|" \
    -e "s|^host = .*|host = oslab-ovn|" \
    -e "s|^log_dir = .*|log_dir = $OLOG|" \
    -e "s|^log_file = .*|log_file = neutron-ovn.log|" \
    -e "s|^api_workers = .*|api_workers = $OVN_WORKERS|" \
    -e "s|/neutron?charset|/neutron_ovn?charset|" \
    -e "s|^lock_path = .*|lock_path = $OVAR/neutron/lock|" \
    "$lab_etc/neutron.conf" >"$OETC/neutron.conf"
  cp "$lab_etc/api-paste.ini" "$OETC/api-paste.ini"
  sed -i -e "s|^api_paste_config = .*|api_paste_config = $OETC/api-paste.ini|" "$OETC/neutron.conf"
  # ovn_metadata_enabled as on real clouds: it gives every DHCP subnet a metadata port at its
  # first free address (.2 next to a .1 gateway), which the operator must live with.
  cat >"$OETC/plugins/ml2/ml2_conf.ini" <<EOF
[ml2]
type_drivers = local,flat,geneve
tenant_network_types = geneve
mechanism_drivers = ovn
extension_drivers = port_security
overlay_ip_version = 4
[ml2_type_flat]
flat_networks = *
[ml2_type_geneve]
vni_ranges = 1:65536
max_header_size = 38
[ovn]
ovn_nb_connection = tcp:127.0.0.1:$NB_PORT
ovn_sb_connection = tcp:127.0.0.1:$SB_PORT
ovn_l3_scheduler = leastloaded
ovn_metadata_enabled = true
enable_distributed_floating_ip = false
neutron_sync_mode = log
EOF
  printf 'import sys\nsys.argv = sys.argv[:1]\nfrom neutron.wsgi.api import application  # noqa\n' >"$ORUN/wsgi_neutron_ovn.py"
  "$venv/bin/neutron-db-manage" --config-file "$OETC/neutron.conf" \
    --config-file "$OETC/plugins/ml2/ml2_conf.ini" upgrade heads >"$OLOG/neutron-db-manage.log" 2>&1 \
    || die "neutron-db-manage (neutron_ovn) failed" "$OLOG/neutron-db-manage.log"
  ts "database neutron_ovn migrated"

  # ---- Neutron API (gunicorn, like the lab's, with ASGI_WORKERS) + maintenance worker ----
  # Two API workers as the lab's other Neutrons (a real cloud runs many): with one, calls the
  # operator sends side by side queue behind each other and every figure measured here is a
  # one-worker figure (docs/design.md, "The lab's Neutrons").
  ASGI_WORKERS=$OVN_WORKERS OS_NEUTRON_CONFIG_DIR=$OETC OS_NEUTRON_CONFIG_FILES="neutron.conf;plugins/ml2/ml2_conf.ini" \
    setsid nohup "$venv/bin/gunicorn" --chdir "$ORUN" --bind "127.0.0.1:$NEUTRON_PORT" \
    --workers "$OVN_WORKERS" --threads 8 --timeout 120 --graceful-timeout 2 --no-control-socket \
    --pid "$ORUN/neutron-ovn.pid" --access-logfile "$OLOG/neutron-ovn-access.log" \
    --error-logfile "$OLOG/neutron-ovn-gunicorn.log" wsgi_neutron_ovn:application \
    </dev/null >"$OLOG/neutron-ovn.out" 2>&1 9>&- &
  echo $! >"$ORUN/neutron-ovn.pid"
  setsid nohup "$venv/bin/neutron-ovn-maintenance-worker" --config-file "$OETC/neutron.conf" \
    --config-file "$OETC/plugins/ml2/ml2_conf.ini" --log-file "$OLOG/neutron-ovn-maintenance.log" \
    </dev/null >"$OLOG/neutron-ovn-maintenance.out" 2>&1 9>&- &
  echo $! >"$ORUN/neutron-ovn-maintenance.pid"

  # ---- the data plane: vswitch DB, ovs-vswitchd (userspace datapath), ovn-controller ----
  ovsdb-tool create "$OVAR/ovs/conf.db" /usr/share/openvswitch/vswitch.ovsschema
  ovsdb-server --detach --no-chdir --pidfile="$ORUN/ovsdb-server-ovs.pid" --unixctl="$ORUN/ovsdb-server-ovs.ctl" \
    --log-file="$OLOG/ovsdb-server-ovs.log" --remote="punix:$ORUN/ovs-db.sock" "$OVAR/ovs/conf.db" 9>&-
  ovs-vsctl --db="$OVSDB" --no-wait init
  ovs-vsctl --db="$OVSDB" --no-wait set Open_vSwitch . external_ids:system-id="$OVN_CHASSIS" \
    external_ids:hostname="$OVN_CHASSIS" external_ids:ovn-remote="tcp:127.0.0.1:$SB_PORT" \
    external_ids:ovn-encap-type=geneve external_ids:ovn-encap-ip=127.0.0.1 \
    external_ids:ovn-bridge-datapath-type=netdev
  ovs-vswitchd "$OVSDB" --detach --no-chdir --pidfile="$ORUN/ovs-vswitchd.pid" --unixctl="$ORUN/ovs-vswitchd.ctl" \
    --log-file="$OLOG/ovs-vswitchd.log" 9>&-
  ovn-controller "$OVSDB" --detach --no-chdir --pidfile="$ORUN/ovn-controller.pid" \
    --log-file="$OLOG/ovn-controller.log" 9>&-
  local end=$(( $(date +%s) + 30 ))
  until ovn-sbctl --db="$SBDB" --bare --columns=name find Chassis name="$OVN_CHASSIS" | grep -q . &&
    ovs-vsctl --db="$OVSDB" br-exists br-int; do
    [ "$(date +%s)" -lt "$end" ] || die "ovn-controller registered no chassis $OVN_CHASSIS" "$OLOG/ovn-controller.log"
    sleep 0.2
  done
  ts "data plane: $(ovs-vswitchd --version | head -1), chassis $OVN_CHASSIS, br-int datapath_type=$(ovs-vsctl --db="$OVSDB" get Bridge br-int datapath_type)"

  end=$(( $(date +%s) + 120 ))
  until [ "$(http_code "http://127.0.0.1:$NEUTRON_PORT/v2.0/networks")" = 401 ]; do
    alive neutron-ovn || die "the ML2/OVN Neutron died" "$OLOG/neutron-ovn.log"
    [ "$(date +%s)" -lt "$end" ] || die "the ML2/OVN Neutron did not answer" "$OLOG/neutron-ovn.log"
    sleep 0.3
  done
  ts "ML2/OVN Neutron answering on 127.0.0.1:$NEUTRON_PORT (pid $(cat "$ORUN/neutron-ovn.pid"))"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  healthy) healthy ;;
  *) echo "usage: $0 up|down|healthy" >&2; exit 2 ;;
esac
