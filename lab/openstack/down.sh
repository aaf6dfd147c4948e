#!/usr/bin/env bash
# Stop the lab started by up.sh: only the processes whose PIDs up.sh recorded in $LAB/run/*.pid,
# and only if that PID still runs the expected program (a recycled PID is left alone).
# Bounded: one stop signal, up to 20 s, then SIGKILL of the daemon's own process group (up.sh starts
# each daemon with setsid, so the group is exactly the daemon and its workers).
# gunicorn gets SIGQUIT (quick shutdown): SIGTERM is its graceful stop, which sits out
# --graceful-timeout per server; nothing in a throw-away lab needs in-flight requests finished.
# State (DB files, logs) stays in $LAB until the next up.sh wipes it.
set -euo pipefail
HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
LAB=${LAB:-$HOME/.cache/bnerd-vpn-operator/oslab}
RUN=$LAB/run

group_alive() { kill -0 -- "-$1" 2>/dev/null; }

stop() { # name pidfile-basename expected-substring-of-cmdline signal [group]
  local name=$1 f=$RUN/$2.pid sig=$4 pid pgid
  [ -f "$f" ] || { echo "$name: no pid file"; return 0; }
  pid=$(tr -dc 0-9 <"$f")
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
    echo "$name: pid ${pid:-?} not running"; rm -f "$f"; return 0
  fi
  if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$3"; then
    echo "$name: pid $pid is not $3 any more (recycled pid?), leaving it alone"; rm -f "$f"; return 0
  fi
  pgid=$(ps -o pgid= -p "$pid" | tr -d ' ')
  if [ "${5:-}" = group ] && [ "$pgid" = "$pid" ]; then
    # socat: each connection is a forked child that outlives the parent's exit.
    kill "-$sig" -- "-$pid" 2>/dev/null || true
  else
    kill "-$sig" "$pid" 2>/dev/null || true
  fi
  for _ in $(seq 1 40); do
    if [ "$pgid" = "$pid" ]; then group_alive "$pid" || break; else kill -0 "$pid" 2>/dev/null || break; fi
    sleep 0.5
  done
  if [ "$pgid" = "$pid" ] && group_alive "$pid"; then
    echo "$name: still alive after 20 s, SIGKILL to process group $pid"; kill -KILL -- "-$pid" 2>/dev/null || true
  elif kill -0 "$pid" 2>/dev/null; then
    echo "$name: still alive after 20 s, SIGKILL $pid"; kill -KILL "$pid" 2>/dev/null || true
  fi
  echo "$name: stopped pid $pid"
  rm -f "$f"
}

# Reverse start order: the TLS proxy and the API servers first (all at once, each takes a few
# seconds to exit), the database last.
stop tls-keystone tls-keystone socat TERM group &
stop tls-neutron tls-neutron socat TERM group &
stop neutron neutron gunicorn QUIT &
stop neutron-tagged neutron-tagged gunicorn QUIT &
stop keystone keystone gunicorn QUIT &
# The ML2/OVN Neutron and its data plane (ovn.sh), by its own pid files.
bash "$(dirname "${BASH_SOURCE[0]}")/ovn.sh" down &
# The older Neutron (older.sh), by its own pid file.
bash "$(dirname "${BASH_SOURCE[0]}")/older.sh" down &
wait
stop mariadb mariadb mariadbd TERM
rm -f "$RUN/lab.env" "$RUN/clouds.yaml" "$RUN/venv.path"
