#!/usr/bin/env bash
# Runs a program from an exported image root filesystem (image/build.sh) the way a pod with
# the chart's securityContext runs it, without a container runtime (crun cannot start
# containers in this sandbox):
#   - its own mount namespace; the root is a read-only bind of <rootfs>;
#   - /proc, a /dev with null/zero/random/urandom, and the host's /etc/hosts and
#     /etc/resolv.conf, as the runtime and the kubelet provide them;
#   - each --mount SRC:DST bind-mounted read-only at DST, as Kubernetes mounts a Secret;
#   - UID/GID 65532, no supplementary groups, no capabilities, no_new_privs
#     (allowPrivilegeEscalation: false); cwd /;
#   - the caller's environment and network (loopback labs) unchanged.
# Every stage exec()s the next, so the process the caller started *is* the program at the
# end: SIGTERM and SIGKILL reach it, and its exit status is the program's.
#
# Usage: image/run-rootfs.sh [--mount SRC:DST]... <rootfs> -- <program> [args...]
#   e.g. image/run-rootfs.sh --mount "$KUBECONFIG:/etc/bnerd/kubeconfig" \
#          ~/.cache/bnerd-vpn-operator/image-rootfs/<id> -- /usr/local/bin/kubectl-clusterlink --help
# Needs root (mount namespace, chroot). Like runc, it creates missing mountpoints (empty
# files and directories) in <rootfs> before making it read-only; nothing else is written.
set -euo pipefail

RUN_UID=65532
RUN_GID=65532

die() { echo "run-rootfs.sh: $*" >&2; exit 2; }

if [[ ${1:-} != __in_mount_namespace__ ]]; then
  [[ $(id -u) == 0 ]] || die "needs root (mount namespace and chroot)"
  # Only validate here; the mounts happen after the re-exec, inside the new namespace, so
  # nothing is ever mounted on the host.
  args=("$@")
  while [[ ${1:-} == --mount ]]; do
    [[ ${2:-} == *:/* ]] || die "--mount wants SRC:/absolute/DST, got '${2:-}'"
    [[ -e ${2%%:*} ]] || die "--mount source ${2%%:*} does not exist"
    shift 2
  done
  [[ $# -ge 3 && $2 == -- ]] || die "usage: $0 [--mount SRC:DST]... <rootfs> -- <program> [args...]"
  [[ -x $1/${3#/} ]] || die "$3 is not an executable in $1"
  exec unshare --mount --propagation private -- "$BASH" "$0" __in_mount_namespace__ "${args[@]}"
fi
shift

mounts=()
while [[ $1 == --mount ]]; do
  mounts+=("$2")
  shift 2
done
root=$(realpath "$1")
shift 2 # <rootfs> --

# A mountpoint for $2 under the root, of the same kind as the source $1.
mountpoint_for() {
  if [[ -d $1 ]]; then
    mkdir -p "$2"
  else
    mkdir -p "$(dirname "$2")"
    [[ -e $2 ]] || : >"$2"
  fi
}

# The root becomes a mount of its own so that it alone can be made read-only below.
mount --bind "$root" "$root"

mkdir -p "$root/proc" "$root/dev"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o nosuid,noexec,mode=0755,size=64k tmpfs "$root/dev"
for d in null zero random urandom; do
  : >"$root/dev/$d"
  mount --bind "/dev/$d" "$root/dev/$d"
done
for f in /etc/hosts /etc/resolv.conf; do
  [[ -f $f ]] || continue
  mountpoint_for "$f" "$root$f"
  mount --bind "$f" "$root$f"
  mount -o remount,bind,ro "$root$f"
done
for m in ${mounts[@]+"${mounts[@]}"}; do
  src=${m%%:*} dst=${m#*:}
  mountpoint_for "$src" "$root$dst"
  mount --bind "$src" "$root$dst"
  mount -o remount,bind,ro "$root$dst"
done

mount -o remount,bind,ro "$root"
# Root ignores file modes, so this write fails only if the mount itself is read-only.
if : 2>/dev/null >"$root/.run-rootfs-write-probe"; then
  rm -f "$root/.run-rootfs-write-probe"
  die "the root filesystem $root is still writable after the read-only remount"
fi

# chroot changes root first (it needs CAP_SYS_CHROOT), then drops to 65532 with an empty
# group list; leaving uid 0 clears the permitted and effective capabilities. By absolute
# path: setpriv's execvp would not search /usr/sbin when the caller cleared PATH.
exec setpriv --no-new-privs -- "$(command -v chroot)" --userspec="$RUN_UID:$RUN_GID" --groups= "$root" "$@"
