#!/usr/bin/env bash
# Stop the processes started by up.sh: kube-controller-manager first, then kubelab
# (only the PIDs recorded in $KLAB/kcm.pid and $KLAB/kubelab.pid, and only if each
# still is that process for this state dir).
# SIGTERM, wait up to KLAB_STOP_TIMEOUT seconds (default 30), then SIGKILL.
#
# Usage: lab/kube/down.sh [--purge]
#   --purge  also delete the state dir $KLAB (etcd data, PKI, tokens, kubeconfigs)
set -euo pipefail

KLAB=${KLAB:-$HOME/.cache/bnerd-vpn-operator/kubelab-run}
PIDFILE=$KLAB/kubelab.pid
KCM_PIDFILE=$KLAB/kcm.pid
STOP_TIMEOUT=${KLAB_STOP_TIMEOUT:-30}
PURGE=0
case "${1:-}" in
  "") ;;
  --purge) PURGE=1 ;;
  *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac

log() { echo "down.sh: $*" >&2; }

# is_ours <pid> <marker>: /proc/<pid>/cmdline (NULs as spaces) contains <marker>
is_ours() {
  [[ -r /proc/$1/cmdline ]] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$2"
}

# stop <name> <pidfile> <marker>
stop() {
  local name=$1 pidfile=$2 marker=$3 pid deadline
  if [[ ! -f $pidfile ]]; then
    log "$name not running (no $pidfile)"
    return 0
  fi
  pid=$(cat "$pidfile")
  if [[ $pid =~ ^[0-9]+$ ]] && is_ours "$pid" "$marker"; then
    log "stopping $name PID $pid (SIGTERM, up to ${STOP_TIMEOUT}s)"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + STOP_TIMEOUT))
    while is_ours "$pid" "$marker" && ((SECONDS < deadline)); do sleep 0.2; done
    if is_ours "$pid" "$marker"; then
      log "still running after ${STOP_TIMEOUT}s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 25); do is_ours "$pid" "$marker" || break; sleep 0.2; done
    fi
    if is_ours "$pid" "$marker"; then
      log "ERROR: PID $pid did not exit"
      exit 1
    fi
    log "$name stopped"
  else
    log "PID file $pidfile is stale (no $name with this state dir running)"
  fi
  rm -f "$pidfile"
}

stop kube-controller-manager "$KCM_PIDFILE" "kube-controller-manager --kubeconfig=$KLAB/kubeconfig "
stop kubelab "$PIDFILE" "--etcd-data-dir $KLAB/etcd "

if ((PURGE)); then
  if [[ -f $KLAB/.kubelab-state ]]; then
    rm -rf -- "$KLAB"
    log "purged $KLAB"
  elif [[ -e $KLAB ]]; then
    log "not purging $KLAB: no .kubelab-state marker (not created by up.sh?)"
    exit 1
  fi
fi
