#!/usr/bin/env bash
# Start the local test cluster in the background on loopback: kubelab (embedded
# etcd + real kube-apiserver) and, beside it, the real kube-controller-manager
# (namespace controller, garbage collector, ...), and write a kubeconfig for it.
# Idempotent: if both are already up and healthy, this returns in well under a second;
# if only kubelab runs (started by an older up.sh), only kube-controller-manager is started.
#
# Env:
#   KLAB              state dir (default $HOME/.cache/bnerd-vpn-operator/kubelab-run)
#   KLAB_PORT         apiserver secure port on 127.0.0.1 (default 16443)
#   KLAB_ETCD_PORT    etcd client port on 127.0.0.1 (default 22379; peer port = +1)
#   KLAB_KCM_PORT     kube-controller-manager secure port on 127.0.0.1 (default 16257)
#   KLAB_KCM=0        run the apiserver alone, without kube-controller-manager
#   KLAB_TIMEOUT      seconds to wait for /readyz and /healthz (default 120)
#   KLAB_ETCD_FSYNC=1 keep etcd fsync on (default off: faster, the data is disposable)
#   KLAB_BIN          use this kubelab binary instead of calling build.sh
#   KLAB_KCM_BIN      use this kube-controller-manager binary instead of calling build.sh
#
# Outputs in $KLAB: kubeconfig (user admin, group system:masters),
#   kubeconfig-operator-test (user operator-test, no groups, no RBAC grants),
#   kubelab.pid, kubelab.log, kcm.pid, kcm.log, pki/, tokens.csv, etcd/.
# The last line on stdout is the admin kubeconfig path.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KLAB=${KLAB:-$HOME/.cache/bnerd-vpn-operator/kubelab-run}
PORT=${KLAB_PORT:-16443}
ETCD_PORT=${KLAB_ETCD_PORT:-22379}
ETCD_PEER_PORT=$((ETCD_PORT + 1))
KCM_PORT=${KLAB_KCM_PORT:-16257}
RUN_KCM=${KLAB_KCM:-1}
TIMEOUT=${KLAB_TIMEOUT:-120}
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1 # first IP of SERVICE_CIDR: the "kubernetes" service

PKI=$KLAB/pki
PIDFILE=$KLAB/kubelab.pid
LOG=$KLAB/kubelab.log
KUBECONFIG_ADMIN=$KLAB/kubeconfig
KUBECONFIG_OPTEST=$KLAB/kubeconfig-operator-test
URL=https://127.0.0.1:$PORT
KCM_PIDFILE=$KLAB/kcm.pid
KCM_LOG=$KLAB/kcm.log
KCM_URL=https://127.0.0.1:$KCM_PORT

log() { echo "up.sh: $*" >&2; }
die() { echo "up.sh: ERROR: $*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

for c in openssl curl; do command -v "$c" >/dev/null || die "$c not found"; done

# pid_alive: the recorded PID exists and is a kubelab using this state dir
# (guards against a recycled PID).
pid_alive() {
  [[ -f $PIDFILE ]] || return 1
  local pid; pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "--etcd-data-dir $KLAB/etcd " || return 1
  return 0
}

# kcm_alive: the recorded PID exists and is a kube-controller-manager for this state dir.
kcm_alive() {
  [[ -f $KCM_PIDFILE ]] || return 1
  local pid; pid=$(cat "$KCM_PIDFILE" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "kube-controller-manager --kubeconfig=$KUBECONFIG_ADMIN " || return 1
  return 0
}

readyz() {
  [[ -f $KLAB/admin.token && -f $PKI/ca.crt ]] || return 1
  curl -fsS --max-time 3 --cacert "$PKI/ca.crt" \
    -H "Authorization: Bearer $(cat "$KLAB/admin.token")" "$URL/readyz" >/dev/null 2>&1
}

wait_ready() { # wait_ready <t0>
  local t0=$1 deadline=$((SECONDS + TIMEOUT))
  until readyz; do
    if ! pid_alive; then
      log "kubelab exited during startup; last log lines ($LOG):"
      tail -n 40 "$LOG" >&2 || true
      rm -f "$PIDFILE"
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      log "not ready after ${TIMEOUT}s (still running as PID $(cat "$PIDFILE"), see $LOG); last log lines:"
      tail -n 20 "$LOG" >&2 || true
      curl -sS --max-time 3 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(cat "$KLAB/admin.token")" \
        "$URL/readyz?verbose" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
  log "ready at $URL after $(since "$t0") s (PID $(cat "$PIDFILE"))"
}

# kcm_healthz: kube-controller-manager's /healthz (open without credentials: it is in
# its --authorization-always-allow-paths default) answers ok; it includes the started
# controllers' own checks.
kcm_healthz() {
  [[ -f $PKI/kcm.crt ]] || return 1
  [[ $(curl -fsS --max-time 3 --cacert "$PKI/ca.crt" "$KCM_URL/healthz" 2>/dev/null) == ok ]]
}

kcm_wait_healthy() { # kcm_wait_healthy <t0>
  local t0=$1 deadline=$((SECONDS + TIMEOUT))
  until kcm_healthz; do
    if ! kcm_alive; then
      log "kube-controller-manager exited during startup; last log lines ($KCM_LOG):"
      tail -n 40 "$KCM_LOG" >&2 || true
      rm -f "$KCM_PIDFILE"
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      log "kube-controller-manager not healthy after ${TIMEOUT}s (PID $(cat "$KCM_PIDFILE"), see $KCM_LOG):"
      curl -sS --max-time 3 --cacert "$PKI/ca.crt" "$KCM_URL/healthz?verbose" >&2 || true
      exit 1
    fi
    sleep 0.3
  done
  log "kube-controller-manager healthy at $KCM_URL after $(since "$t0") s (PID $(cat "$KCM_PIDFILE"))"
}

# kcm_stop: stop a kube-controller-manager left from an earlier start (only the recorded
# PID, only if it is ours), before kubelab is started anew under it.
kcm_stop() {
  kcm_alive || { rm -f "$KCM_PIDFILE"; return 0; }
  local pid; pid=$(cat "$KCM_PIDFILE")
  log "stopping the old kube-controller-manager PID $pid"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kcm_alive || break; sleep 0.2; done
  if kcm_alive; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; fi
  rm -f "$KCM_PIDFILE"
}

# kcm_start: run kube-controller-manager against the apiserver with the admin kubeconfig
# and wait for /healthz. --controllers='*' is every controller that is on by default
# (`kube-controller-manager --help` lists them), as in a kubeadm cluster: namespace-,
# garbage-collector-, serviceaccount-, serviceaccount-token-, root-ca-certificate-publisher-,
# deployment-, replicaset-, job-, endpointslice-, resourcequota-,
# certificatesigningrequest-signing-controller, ... The cloud and node-IPAM ones need a
# cloud provider or --allocate-node-cidrs and do not start.
kcm_start() {
  [[ $RUN_KCM == 1 ]] || { log "KLAB_KCM=$RUN_KCM: not starting kube-controller-manager"; return 0; }
  if kcm_alive; then
    if ! kcm_healthz; then
      log "kube-controller-manager PID $(cat "$KCM_PIDFILE") is running but not healthy yet; waiting"
      kcm_wait_healthy "$(now)"
    fi
    return 0
  fi
  rm -f "$KCM_PIDFILE"
  if [[ -z ${KLAB_KCM_BIN:-} ]]; then
    KLAB_KCM_BIN=$("$HERE/build.sh" kcm | sed -n 's/^KCM_BIN=//p')
  fi
  [[ -x $KLAB_KCM_BIN ]] || die "kube-controller-manager binary not found: $KLAB_KCM_BIN"
  if (exec 3<>"/dev/tcp/127.0.0.1/$KCM_PORT") 2>/dev/null; then
    die "127.0.0.1:$KCM_PORT is already in use by another process (set KLAB_KCM_PORT)"
  fi
  if [[ ! -f $PKI/kcm.crt ]]; then
    log "generating kube-controller-manager serving cert"
    openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=kube-controller-manager" \
      -keyout "$PKI/kcm.key" -out "$PKI/kcm.csr" 2>/dev/null
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" >"$PKI/kcm.ext"
    openssl x509 -req -sha256 -days 3650 -in "$PKI/kcm.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
      -CAcreateserial -extfile "$PKI/kcm.ext" -out "$PKI/kcm.crt" 2>/dev/null
    rm -f "$PKI/kcm.csr"
    chmod 600 "$PKI/kcm.key"
  fi
  local kcm_args=(
    --kubeconfig="$KUBECONFIG_ADMIN"
    # No --authentication-kubeconfig / --authorization-kubeconfig: delegated authn wants the
    # front-proxy (requestheader) CA, which this apiserver does not have, and logs an error
    # about it every few seconds. Only the always-allowed /healthz, /readyz, /livez are used.
    --bind-address=127.0.0.1
    --secure-port="$KCM_PORT"
    --tls-cert-file="$PKI/kcm.crt"
    --tls-private-key-file="$PKI/kcm.key"
    --leader-elect=false
    # every controller talks as admin: no per-controller service accounts to set up
    --use-service-account-credentials=false
    --controllers='*'
    --cluster-name=kubelab
    --service-cluster-ip-range="$SERVICE_CIDR"
    # serviceaccount-token- and root-ca-certificate-publisher-controller (kube-root-ca.crt)
    --service-account-private-key-file="$PKI/sa.key"
    --root-ca-file="$PKI/ca.crt"
    # certificatesigningrequest-signing-controller: approved CSRs get signed by the lab CA
    --cluster-signing-cert-file="$PKI/ca.crt"
    --cluster-signing-key-file="$PKI/ca.key"
    # the default is /usr/libexec/kubernetes/kubelet-plugins/volume/exec/, which it creates
    --flex-volume-plugin-dir="$KLAB/kcm-flexvolume"
    --profiling=false
  )
  log "starting kube-controller-manager ($KLAB_KCM_BIN) on $KCM_URL, log $KCM_LOG"
  local t0; t0=$(now)
  echo "=== $(date -u +%FT%TZ) up.sh start" >>"$KCM_LOG"
  setsid sh -c 'echo $$ >"$0"; exec "$@"' "$KCM_PIDFILE" \
    "$KLAB_KCM_BIN" "${kcm_args[@]}" </dev/null >>"$KCM_LOG" 2>&1 7>&- &
  for _ in $(seq 1 50); do [[ -s $KCM_PIDFILE ]] && break; sleep 0.1; done
  [[ -s $KCM_PIDFILE ]] || die "kube-controller-manager did not record its PID in $KCM_PIDFILE"
  kcm_wait_healthy "$t0"
}

# One up.sh at a time per state dir (tests call it concurrently); the processes it
# starts do not inherit this lock (7>&- below).
mkdir -p "$KLAB"
exec 7>"$KLAB/.up.lock"
flock -w 1800 7 || die "another up.sh has held $KLAB/.up.lock for 30 min"

# --- already running? ----------------------------------------------------------
if pid_alive; then
  if readyz; then
    log "already up (PID $(cat "$PIDFILE")) at $URL"
  else
    log "PID $(cat "$PIDFILE") is running but not ready yet; waiting"
    wait_ready "$(now)"
  fi
  kcm_start
  echo "$KUBECONFIG_ADMIN"
  exit 0
fi
rm -f "$PIDFILE"
# a kube-controller-manager left from an earlier kubelab starts again with the new one
kcm_stop

# --- binaries --------------------------------------------------------------------
if [[ -z ${KLAB_BIN:-} ]]; then
  if [[ $RUN_KCM == 1 && -z ${KLAB_KCM_BIN:-} ]]; then
    bins=$("$HERE/build.sh" kube)
    KLAB_BIN=$(sed -n 's/^KUBELAB_BIN=//p' <<<"$bins")
    KLAB_KCM_BIN=$(sed -n 's/^KCM_BIN=//p' <<<"$bins")
  else
    KLAB_BIN=$("$HERE/build.sh" kubelab | sed -n 's/^KUBELAB_BIN=//p')
  fi
fi
[[ -x $KLAB_BIN ]] || die "kubelab binary not found: $KLAB_BIN"

# --- ports free? -----------------------------------------------------------------
ports=("$PORT" "$ETCD_PORT" "$ETCD_PEER_PORT")
[[ $RUN_KCM == 1 ]] && ports+=("$KCM_PORT")
for p in "${ports[@]}"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    die "127.0.0.1:$p is already in use by another process (set KLAB_PORT / KLAB_ETCD_PORT / KLAB_KCM_PORT)"
  fi
done

# --- state dir, PKI, tokens (created once, reused on restart) ----------------------
mkdir -p "$KLAB" "$PKI"
chmod 700 "$KLAB"
touch "$KLAB/.kubelab-state" # marker checked by down.sh --purge

if [[ ! -f $PKI/ca.crt ]]; then
  log "generating CA"
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
    -subj "/CN=kubelab-ca" -keyout "$PKI/ca.key" -out "$PKI/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
fi
if [[ ! -f $PKI/apiserver.crt ]]; then
  log "generating apiserver serving cert"
  openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=kube-apiserver" \
    -keyout "$PKI/apiserver.key" -out "$PKI/apiserver.csr" 2>/dev/null
  cat >"$PKI/apiserver.ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
  openssl x509 -req -sha256 -days 3650 -in "$PKI/apiserver.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAcreateserial -extfile "$PKI/apiserver.ext" -out "$PKI/apiserver.crt" 2>/dev/null
  rm -f "$PKI/apiserver.csr"
fi
if [[ ! -f $PKI/sa.key ]]; then
  log "generating service-account key pair"
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
fi
if [[ ! -f $KLAB/tokens.csv ]]; then
  log "generating static tokens"
  openssl rand -hex 24 >"$KLAB/admin.token"
  openssl rand -hex 24 >"$KLAB/operator-test.token"
  # token,user,uid[,"group1,group2"]
  {
    echo "$(cat "$KLAB/admin.token"),admin,admin,\"system:masters\""
    echo "$(cat "$KLAB/operator-test.token"),operator-test,operator-test"
  } >"$KLAB/tokens.csv"
fi
chmod 600 "$PKI"/*.key "$KLAB"/*.token "$KLAB/tokens.csv"

write_kubeconfig() { # write_kubeconfig <file> <user> <token-file>
  local tmp="$1.tmp.$$"
  cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubelab
  cluster:
    server: $URL
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $2
  user:
    token: $(cat "$3")
contexts:
- name: kubelab-$2
  context:
    cluster: kubelab
    user: $2
current-context: kubelab-$2
EOF
  chmod 600 "$tmp"
  mv -f "$tmp" "$1"
}
write_kubeconfig "$KUBECONFIG_ADMIN" admin "$KLAB/admin.token"
write_kubeconfig "$KUBECONFIG_OPTEST" operator-test "$KLAB/operator-test.token"

# --- start -------------------------------------------------------------------------
kubelab_args=(--etcd-data-dir "$KLAB/etcd" --etcd-client-port "$ETCD_PORT" --etcd-peer-port "$ETCD_PEER_PORT")
[[ ${KLAB_ETCD_FSYNC:-0} == 1 ]] || kubelab_args+=(--etcd-unsafe-no-fsync)
apiserver_args=(
  --etcd-servers="http://127.0.0.1:$ETCD_PORT"
  --bind-address=127.0.0.1
  --advertise-address=127.0.0.1
  --secure-port="$PORT"
  --cert-dir="$KLAB/cert-dir"
  --tls-cert-file="$PKI/apiserver.crt"
  --tls-private-key-file="$PKI/apiserver.key"
  --client-ca-file="$PKI/ca.crt"
  --token-auth-file="$KLAB/tokens.csv"
  --authorization-mode=Node,RBAC
  --service-cluster-ip-range="$SERVICE_CIDR"
  --service-account-issuer=https://kubernetes.default.svc.cluster.local
  --service-account-key-file="$PKI/sa.pub"
  --service-account-signing-key-file="$PKI/sa.key"
  # Endpoints cannot hold a loopback address, so the default "lease" reconciler
  # would fail every few seconds trying to publish 127.0.0.1 for the kubernetes service.
  --endpoint-reconciler-type=none
  --allow-privileged=true
  --profiling=false
)

log "starting kubelab ($KLAB_BIN) on $URL, etcd on 127.0.0.1:$ETCD_PORT, log $LOG"
t0=$(now)
# setsid: own session, so the caller's Ctrl-C / job control does not reach it.
# The inner sh records its own PID, then execs kubelab (same PID).
echo "=== $(date -u +%FT%TZ) up.sh start" >>"$LOG"
setsid sh -c 'echo $$ >"$0"; exec "$@"' "$PIDFILE" \
  "$KLAB_BIN" "${kubelab_args[@]}" -- "${apiserver_args[@]}" </dev/null >>"$LOG" 2>&1 7>&- &
for _ in $(seq 1 50); do [[ -s $PIDFILE ]] && break; sleep 0.1; done
[[ -s $PIDFILE ]] || die "kubelab did not record its PID in $PIDFILE"

wait_ready "$t0"
kcm_start
log "kubeconfig (admin, system:masters): $KUBECONFIG_ADMIN"
log "kubeconfig (operator-test, no groups): $KUBECONFIG_OPTEST"
echo "$KUBECONFIG_ADMIN"
