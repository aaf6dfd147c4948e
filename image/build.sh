#!/usr/bin/env bash
# Builds the operator image ghcr.io/bnerd/bnerd-vpn-operator:<workspace version> from the
# repository's Containerfile, prints its size, and exports its root filesystem to a
# directory for image/run-rootfs.sh (CI runs the image's own binary from it; no container
# runtime works in this sandbox).
#
#   1. static binaries: cargo build --release --target x86_64-unknown-linux-musl
#      (bnerd-vpn-operator, kubectl-clusterlink), checked to be statically linked;
#   2. a staged context (bin/, etc/ with the CA bundle, passwd and group) and podman build;
#   3. the image's root filesystem, copied from `podman image mount`, in
#      $BNERD_IMAGE_ROOTFS_DIR/<image id>; an unchanged image reuses its directory.
# Installs what it lacks (Debian: podman, musl-tools, ca-certificates, file; rustup's musl
# target). Progress and sizes go to stderr; the last line on stdout is the rootfs path.
#
# Env:
#   IMAGE_REPO               default ghcr.io/bnerd/bnerd-vpn-operator
#   IMAGE_SOURCE             org.opencontainers.image.source, default https://github.com/bnerd/bnerd-vpn-operator
#   BNERD_IMAGE_TARGET_DIR   cargo target dir of the musl build, default $CARGO_TARGET_DIR/image
#                            (a directory of its own: nothing is shared with the host build)
#   BNERD_IMAGE_ROOTFS_DIR   default ~/.cache/bnerd-vpn-operator/image-rootfs
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TARGET=x86_64-unknown-linux-musl
CACHE=$HOME/.cache/bnerd-vpn-operator
IMAGE_REPO=${IMAGE_REPO:-ghcr.io/bnerd/bnerd-vpn-operator}
IMAGE_SOURCE=${IMAGE_SOURCE:-https://github.com/bnerd/bnerd-vpn-operator}
TARGET_DIR=${BNERD_IMAGE_TARGET_DIR:-${CARGO_TARGET_DIR:-$CACHE/target}/image}
ROOTFS_DIR=${BNERD_IMAGE_ROOTFS_DIR:-$CACHE/image-rootfs}
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

log() { echo "image/build.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
mb() { awk -v b="$1" 'BEGIN{printf "%.1f MB", b/1000000}'; }

SUDO=
[[ $(id -u) == 0 ]] || SUDO=sudo
apt_install() {
  log "installing $* (apt)"
  # A fresh machine may have no package lists yet; update only when the install needs it.
  # The labs may be installing their packages at the same time (test.sh starts them while the
  # crates build): wait for dpkg's lock rather than fail on it.
  local apt=($SUDO apt-get -o DPkg::Lock::Timeout=900)
  "${apt[@]}" install -y -q "$@" >&2 || { "${apt[@]}" update -q >&2 && "${apt[@]}" install -y -q "$@" >&2; }
}
missing=()
command -v podman >/dev/null || missing+=(podman)
command -v musl-gcc >/dev/null || missing+=(musl-tools)
command -v file >/dev/null || missing+=(file)
[[ -f $CA_BUNDLE ]] || missing+=(ca-certificates)
((${#missing[@]} == 0)) || apt_install "${missing[@]}"
rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET" >&2

VERSION=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)
[[ -n $VERSION ]] || die "no version in Cargo.toml's [workspace.package]"
TAG=$IMAGE_REPO:$VERSION
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
# The label names a commit; say so when the binaries were built from something else.
if [[ $REVISION != unknown ]] && ! git diff --quiet HEAD -- 2>/dev/null; then REVISION=$REVISION-dirty; fi
# Layer mtimes and the image's creation time from the commit, so that the same binaries give
# the same image ID (and the export below is reused).
EPOCH=$(git log -1 --format=%ct 2>/dev/null || echo 0)

# 1. Static binaries. ring's C and assembly parts need a musl C compiler. Size settings go
# by env rather than into Cargo.toml's release profile, which `cargo bench` also uses:
# stripped symbols, opt-level "s" and panic=abort keep the image under 25 MB. Measured: 23.0 MB
# with "s" alone in 0.3.0's first build, 24.6 MB after the engine, plan and hostile-input work;
# panic=abort took the two binaries from 24.4 to 20.2 MB (no unwinding tables). It changes
# nothing the operator relies on: nothing catches a panic (no catch_unwind; the reconciles run
# inside the controller's stream, not in tasks whose panics would be isolated), so a bug
# already ended the process and the pod restarts as a standby. opt-level "z" saved 0.3 MB
# more and was left; fat LTO gave 22.2 MB (before abort) but made each rebuild after a source
# change take ~4 CPU minutes instead of ~1; the operator waits on the network, not on its code.
t0=$(now)
log "cargo build --release --target $TARGET (target dir $TARGET_DIR)"
CC_x86_64_unknown_linux_musl=${CC_x86_64_unknown_linux_musl:-musl-gcc} \
  CARGO_TARGET_DIR=$TARGET_DIR \
  CARGO_PROFILE_RELEASE_STRIP=symbols \
  CARGO_PROFILE_RELEASE_OPT_LEVEL=s \
  CARGO_PROFILE_RELEASE_PANIC=abort \
  cargo build --release --locked --target "$TARGET" \
  -p bnerd-vpn-operator -p bnerd-clusterlink-cli --bins >&2
log "binaries built in $(since "$t0") s"
BIN=$TARGET_DIR/$TARGET/release
for b in bnerd-vpn-operator kubectl-clusterlink; do
  desc=$(file -b "$BIN/$b")
  [[ $desc == *static* ]] || die "$b is not statically linked: $desc"
  log "$b: $(mb "$(stat -c %s "$BIN/$b")"), $desc"
done

# 2. Context and image.
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin" "$ctx/etc/ssl/certs"
cp "$BIN/bnerd-vpn-operator" "$BIN/kubectl-clusterlink" "$ctx/bin/"
cp "$CA_BUNDLE" "$ctx/etc/ssl/certs/ca-certificates.crt"
# Names for 65532 only: tools that resolve the process's user (ps, a debug container's
# shell) show "nonroot" instead of a bare number; the binaries never read these files.
echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' >"$ctx/etc/passwd"
echo 'nonroot:x:65532:' >"$ctx/etc/group"
chmod 0755 "$ctx/bin/"*
chmod 0644 "$ctx/etc/passwd" "$ctx/etc/group" "$ctx/etc/ssl/certs/ca-certificates.crt"

old_id=$(podman image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)
t0=$(now)
# --layers=false: one layer, and no intermediate images left in the store.
podman build -q --layers=false --timestamp "$EPOCH" -f Containerfile -t "$TAG" \
  --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" --build-arg SOURCE="$IMAGE_SOURCE" \
  "$ctx" >/dev/null
id=$(podman image inspect --format '{{.Id}}' "$TAG")
log "podman build: $TAG (${id:0:12}) in $(since "$t0") s"
if [[ -n $old_id && $old_id != "$id" ]]; then
  # The previous build of this tag is now untagged; other images are left alone.
  podman rmi "$old_id" >/dev/null 2>&1 || true
fi

# The size a node stores (uncompressed layers) and the size a registry serves (gzip), the
# latter measured by writing the image as an OCI layout with gzip layers.
size=$(podman image inspect --format '{{.Size}}' "$TAG")
oci=$(mktemp -d)
podman push -q --compression-format gzip "$TAG" "oci:$oci/layout" >/dev/null
gz=$(python3 -c '
import json, sys
d = sys.argv[1]
def blob(digest): return open(d + "/blobs/sha256/" + digest.split(":")[1], "rb").read()
m = json.loads(blob(json.load(open(d + "/index.json"))["manifests"][0]["digest"]))
print(sum(l["size"] for l in m["layers"]) + m["config"]["size"])' "$oci/layout")
rm -rf "$oci"
log "image size: $(mb "$size") uncompressed (on a node), $(mb "$gz") gzip-compressed (pulled from a registry); target: under 25 MB"
((size < 25000000)) || die "the image is $(mb "$size") uncompressed: over its 25 MB limit"
# What a registry UI, a scanner or `podman inspect` shows: the version and the source it came from.
label() { podman image inspect --format "{{index .Config.Labels \"org.opencontainers.image.$1\"}}" "$TAG"; }
[[ $(label version) == "$VERSION" ]] || die "label org.opencontainers.image.version is '$(label version)', want $VERSION"
[[ $(label revision) == "$REVISION" ]] || die "label org.opencontainers.image.revision is '$(label revision)', want $REVISION"
[[ -n $(label source) && $(label source) == "$IMAGE_SOURCE" ]] || die "label org.opencontainers.image.source is '$(label source)', want $IMAGE_SOURCE"
[[ $(podman image inspect --format '{{.Config.User}}' "$TAG") == 65532:65532 ]] || die "the image does not run as 65532:65532"
log "labels: version $VERSION, revision ${REVISION:0:12}, source $IMAGE_SOURCE; user 65532:65532"

# 3. The image's root filesystem, keyed by image ID: a running test keeps its directory even
# when a later build makes another.
mkdir -p "$ROOTFS_DIR"
dest=$ROOTFS_DIR/${id:0:12}
if [[ ! -e $dest/usr/local/bin/bnerd-vpn-operator ]]; then
  t0=$(now)
  tmp=$(mktemp -d "$ROOTFS_DIR/.export.XXXXXX")
  mnt=$(podman image mount "$TAG")
  cp -a "$mnt/." "$tmp/"
  podman image unmount "$TAG" >/dev/null
  # A rename never replaces a directory with content: when a concurrent run got there first,
  # its export (the same image) stays, and may already be in use.
  mv -T "$tmp" "$dest" 2>/dev/null || rm -rf "$tmp"
  [[ -e $dest/usr/local/bin/bnerd-vpn-operator ]] || die "$dest exists but holds no operator binary"
  log "root filesystem exported in $(since "$t0") s"
fi
touch "$dest"
# Keep the three newest exports; older ones belong to images that no longer exist.
find "$ROOTFS_DIR" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended -regex '.*/[0-9a-f]{12}' -printf '%T@ %p\n' |
  sort -rn | tail -n +4 | cut -d' ' -f2- | xargs -r rm -rf
log "root filesystem: $dest (run: image/run-rootfs.sh $dest -- /usr/local/bin/bnerd-vpn-operator)"
echo "$dest"
