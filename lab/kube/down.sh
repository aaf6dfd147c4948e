#!/usr/bin/env bash
# Stop the kubelab process started by up.sh (only the PID recorded in
# $KLAB/kubelab.pid, and only if it still is that kubelab).
# SIGTERM, wait up to KLAB_STOP_TIMEOUT seconds (default 30), then SIGKILL.
#
# Usage: lab/kube/down.sh [--purge]
#   --purge  also delete the state dir $KLAB (etcd data, PKI, tokens, kubeconfigs)
set -euo pipefail

KLAB=${KLAB:-$HOME/.cache/bnerd-vpn-operator/kubelab-run}
PIDFILE=$KLAB/kubelab.pid
STOP_TIMEOUT=${KLAB_STOP_TIMEOUT:-30}
PURGE=0
case "${1:-}" in
  "") ;;
  --purge) PURGE=1 ;;
  *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac

log() { echo "down.sh: $*" >&2; }

is_ours() { # is_ours <pid>
  [[ -r /proc/$1/cmdline ]] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "--etcd-data-dir $KLAB/etcd "
}

if [[ -f $PIDFILE ]]; then
  pid=$(cat "$PIDFILE")
  if [[ $pid =~ ^[0-9]+$ ]] && is_ours "$pid"; then
    log "stopping kubelab PID $pid (SIGTERM, up to ${STOP_TIMEOUT}s)"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + STOP_TIMEOUT))
    while is_ours "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
    if is_ours "$pid"; then
      log "still running after ${STOP_TIMEOUT}s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 25); do is_ours "$pid" || break; sleep 0.2; done
    fi
    if is_ours "$pid"; then
      log "ERROR: PID $pid did not exit"
      exit 1
    fi
    log "stopped"
  else
    log "PID file $PIDFILE is stale (no kubelab with this state dir running)"
  fi
  rm -f "$PIDFILE"
else
  log "not running (no $PIDFILE)"
fi

if ((PURGE)); then
  if [[ -f $KLAB/.kubelab-state ]]; then
    rm -rf -- "$KLAB"
    log "purged $KLAB"
  elif [[ -e $KLAB ]]; then
    log "not purging $KLAB: no .kubelab-state marker (not created by up.sh?)"
    exit 1
  fi
fi
