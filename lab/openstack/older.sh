#!/usr/bin/env bash
# The lab's older Neutron: release 2025.1 (neutron 26), API only, beside the lab's Neutron 29,
# on its own database in the lab's MariaDB and its own venv, behind the same Keystone.
#
#   Neutron 26 API, ML2 without a backend   127.0.0.1:9699 -> /v2.0, Keystone region Region2025
#
# Why 2025.1: it is the newest release before the one the lab runs, still maintained, and the
# last whose routes per router are the server's max_routes (400 RoutesExhausted) rather than
# the router_route quota; clouds upgrade a release or two behind. 2024.1 is unmaintained.
# Its libraries are pinned by openstack/requirements' upper-constraints of stable/2025.1
# (constraints-2025.1.txt, copied unchanged).
#
# Usage:   bash lab/openstack/older.sh up      (no-op when it answers; else from scratch)
#          bash lab/openstack/older.sh down    (by the PID under $LAB/n2025/run only)
#          bash lab/openstack/older.sh healthy
#          bash lab/openstack/older.sh venv    (only its venv: up.sh builds it beside the lab's own)
# Needs the lab's MariaDB and its Neutron config (up.sh starts this after writing them).
set -euo pipefail
HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB=${LAB:-$HOME/.cache/bnerd-vpn-operator/oslab}
CACHE=${OSLAB_CACHE:-$HOME/.cache/bnerd-vpn-operator}
CONSTRAINTS=$HERE/constraints-2025.1.txt
VENV=${OSLAB_VENV_2025:-$CACHE/oslab-venv-2025.1-$(sha256sum "$CONSTRAINTS" | cut -c1-12)}
PY=${OSLAB_PYTHON:-python3}
O=$LAB/n2025
ORUN=$O/run OVAR=$O/var OETC=$O/etc OLOG=$LAB/log/n2025
PORT=9699
export PYTHONWARNINGS=ignore
t0=$(date +%s%N)
exec 4>&2
ts() { printf '[oslab 2025.1 %5.1fs] %s\n' "$(( ($(date +%s%N) - t0) / 1000000 ))e-3" "$*" >&4; }
die() { { echo "oslab 2025.1: ERROR: $1"; [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 30 "$2"; } >&4; exit 1; }
http_code() { curl -m 5 -s -o /dev/null -w '%{http_code}' "$1" 2>/dev/null || true; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
alive() { [ -s "$ORUN/$1.pid" ] && kill -0 "$(tr -dc 0-9 <"$ORUN/$1.pid")" 2>/dev/null; }

down() {
  local f=$ORUN/neutron-2025.pid pid cmd
  [ -s "$f" ] || return 0
  pid=$(tr -dc 0-9 <"$f")
  cmd=$( [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
  if [ -n "$pid" ] && [[ $cmd == *gunicorn* ]]; then
    kill -QUIT -- "-$pid" 2>/dev/null || kill -QUIT "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "/tmp/neutron_start_time$pid" "/tmp/neutron_first_worker$pid"
    echo "2025.1: stopped neutron-2025 ($pid)" >&2
  fi
  rm -f "$f"
}

healthy() {
  alive neutron-2025 && [ "$(http_code "http://127.0.0.1:$PORT/v2.0/networks")" = 401 ]
}

venv() {
  (
    exec 8>"$VENV.lock"; flock -w 900 8 || exit 1
    if [ ! -f "$VENV/.oslab-complete" ]; then
      rm -rf "$VENV"
      ts "building venv $VENV (pip, ~1 min)"
      "$PY" -m venv "$VENV"
      "$VENV/bin/pip" install -q --upgrade pip >"$VENV.pip.log" 2>&1
      "$VENV/bin/pip" install -q -c "$CONSTRAINTS" "neutron==26.*" gunicorn PyMySQL \
        >>"$VENV.pip.log" 2>&1
      touch "$VENV/.oslab-complete"
    fi
  ) 9>&- || die "venv build failed" "$VENV.pip.log"
}

up() {
  local sock=$LAB/var/mysql/mysqld.sock lab_etc=$LAB/etc/neutron
  if healthy; then ts "Neutron 2025.1 already up"; return 0; fi
  down
  port_busy "$PORT" && die "127.0.0.1:$PORT is in use by a process this lab did not record"
  rm -rf "$O" "$OLOG" && mkdir -p "$ORUN" "$OVAR/neutron/lock" "$OETC/plugins/ml2" "$OLOG"
  venv
  ts "venv ok: $VENV ($("$VENV/bin/pip" show neutron 2>/dev/null | sed -n 's/^Version: /neutron /p'))"

  mariadb --socket="$sock" -uroot -e "
    DROP DATABASE IF EXISTS neutron_2025;
    CREATE DATABASE neutron_2025 CHARACTER SET utf8mb4;
    GRANT ALL ON neutron_2025.* TO 'os'@'127.0.0.1';"

  # The lab's Neutron config (same Keystone, same policy file), its own database and state.
  sed -e "s|^state_path = .*|state_path = $OVAR/neutron|" \
    -e "s|^host = .*|host = oslab-2025|" \
    -e "s|^log_dir = .*|log_dir = $OLOG|" \
    -e "s|^log_file = .*|log_file = neutron-2025.log|" \
    -e "s|^api_workers = .*|api_workers = 1|" \
    -e "s|/neutron?charset|/neutron_2025?charset|" \
    -e "s|^lock_path = .*|lock_path = $OVAR/neutron/lock|" \
    -e "s|^api_paste_config = .*|api_paste_config = $OETC/api-paste.ini|" \
    "$lab_etc/neutron.conf" >"$OETC/neutron.conf"
  cp "$VENV/etc/neutron/api-paste.ini" "$OETC/api-paste.ini"
  cp "$lab_etc/plugins/ml2/ml2_conf.ini" "$OETC/plugins/ml2/ml2_conf.ini"
  printf 'import sys\nsys.argv = sys.argv[:1]\nfrom neutron.wsgi.api import application  # noqa\n' >"$ORUN/wsgi_neutron_2025.py"
  "$VENV/bin/neutron-db-manage" --config-file "$OETC/neutron.conf" \
    --config-file "$OETC/plugins/ml2/ml2_conf.ini" upgrade heads >"$OLOG/neutron-db-manage.log" 2>&1 \
    || die "neutron-db-manage (neutron_2025) failed" "$OLOG/neutron-db-manage.log"
  ts "database neutron_2025 migrated"

  OS_NEUTRON_CONFIG_DIR=$OETC OS_NEUTRON_CONFIG_FILES="neutron.conf;plugins/ml2/ml2_conf.ini" \
    setsid nohup "$VENV/bin/gunicorn" --chdir "$ORUN" --bind "127.0.0.1:$PORT" \
    --workers 1 --threads 8 --timeout 120 --graceful-timeout 2 \
    --pid "$ORUN/neutron-2025.pid" --access-logfile "$OLOG/neutron-2025-access.log" \
    --error-logfile "$OLOG/neutron-2025-gunicorn.log" wsgi_neutron_2025:application \
    </dev/null >"$OLOG/neutron-2025.out" 2>&1 9>&- &
  echo $! >"$ORUN/neutron-2025.pid"
  local end=$(( $(date +%s) + 120 ))
  until [ "$(http_code "http://127.0.0.1:$PORT/v2.0/networks")" = 401 ]; do
    alive neutron-2025 || die "Neutron 2025.1 died" "$OLOG/neutron-2025-gunicorn.log"
    [ "$(date +%s)" -lt "$end" ] || die "Neutron 2025.1 did not answer" "$OLOG/neutron-2025.log"
    sleep 0.3
  done
  ts "Neutron 2025.1 answering on 127.0.0.1:$PORT (pid $(cat "$ORUN/neutron-2025.pid"))"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  healthy) healthy ;;
  venv) mkdir -p "$CACHE" && venv ;;
  *) echo "usage: $0 up|down|healthy|venv" >&2; exit 2 ;;
esac
