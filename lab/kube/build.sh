#!/usr/bin/env bash
# Build (or reuse) the lab binaries, cached OUTSIDE the clone:
#   kubelab: $KLAB_CACHE/kube/<hash>/kubelab   (embedded etcd + real kube-apiserver)
#   kcm:     $KLAB_CACHE/kube/<hash>/kube-controller-manager   (the real one, same
#            k8s.io/kubernetes module and version as kubelab; go.mod names it as a tool)
#   helm:    $KLAB_CACHE/helm/<hash>/helm   (go.mod names it as a tool too)
# One module holds all three, so they share one build list and every package they have in
# common (k8s.io/api, client-go, apimachinery, ...) is compiled once into the Go build cache.
# <hash> covers the module files, main.go, the Go version/platform and BUILD_REV,
# so a cache hit is a plain file check and takes milliseconds. kubelab and
# kube-controller-manager share one <hash> dir: one dir is one lab version.
#
# Usage: lab/kube/build.sh [all|kube|kubelab|kcm|helm]      (default: all; kube = kubelab + kcm)
# stdout: KUBELAB_BIN=<path> / KCM_BIN=<path> / HELM_BIN=<path> lines, so
#   eval "$(lab/kube/build.sh)"   sets all three variables.
# stderr: progress and build times.
#
# Env: KLAB_CACHE (default $HOME/.cache/bnerd-vpn-operator)
#      KLAB_NICE  (default 10; nice level for go build, the build is CPU heavy)
#      KLAB_KEEP  (default 3; after a fresh build, keep this many most recently
#                  used <hash> dirs per binary and delete older ones, ~100 MB each)
set -euo pipefail

# Bump when the build flags below change (it is part of the cache key).
BUILD_REV=1

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${KLAB_CACHE:-$HOME/.cache/bnerd-vpn-operator}
NICE=${KLAB_NICE:-10}
KEEP=${KLAB_KEEP:-3}
WHAT=${1:-all}

case "$WHAT" in all|kube|kubelab|kcm|helm) ;; *) echo "usage: $0 [all|kube|kubelab|kcm|helm]" >&2; exit 2 ;; esac
command -v go >/dev/null || { echo "build.sh: go not found in PATH" >&2; exit 1; }

export CGO_ENABLED=0 # static binaries, like upstream release builds
GOINFO="$(go env GOVERSION GOOS GOARCH) cgo=$CGO_ENABLED rev=$BUILD_REV"

key() { # key <files...>  -> 16 hex chars
  { cat "$@"; echo "$GOINFO"; } | sha256sum | cut -c1-16
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

# prune <root>: keep the $KEEP most recently used <hash> dirs under <root>.
prune() {
  local d
  ls -1dt "$1"/*/ 2>/dev/null | tail -n +"$((KEEP + 1))" | while read -r d; do
    [[ $d == "$1"/????????????????/ ]] || continue
    echo "prune: removing old build $d" >&2
    rm -rf -- "$d"
  done
}

# go_build <out> <dir> <ldflags> <pkg>: build atomically into <out> under a lock,
# so concurrent callers do not both build or see a half-written binary.
go_build() {
  local out=$1 dir=$2 ldflags=$3 pkg=$4
  mkdir -p "$(dirname "$out")"
  exec 9>"$(dirname "$out")/.lock"
  flock 9
  if [[ -x $out ]]; then exec 9>&-; return 0; fi # built by someone else meanwhile
  local tmp="$out.tmp.$$"
  (cd "$dir" && nice -n "$NICE" go build -trimpath -ldflags="$ldflags" -o "$tmp" "$pkg")
  mv -f "$tmp" "$out"
  exec 9>&-
}

# kube_ldflags: version stamping as in kubernetes hack/lib/version.sh; without it
# /version reports v0.0.0-master, which breaks clients that check the server
# version (e.g. helm charts with kubeVersion constraints). Prints the -ldflags value.
kube_ldflags() {
  local kv kmaj kmin kcommit kdate ld pkg
  kv=$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v1\./ {print $2; exit}' "$HERE/go.mod")
  [[ -n $kv ]] || { echo "build.sh: cannot find k8s.io/kubernetes version in go.mod" >&2; exit 1; }
  kmaj=${kv#v}; kmaj=${kmaj%%.*}
  kmin=${kv#v*.}; kmin=${kmin%%.*}
  kcommit=$(cd "$HERE" && go mod download -json k8s.io/kubernetes | sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)".*/\1/p' | head -n1)
  kdate=$(cd "$HERE" && go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)
  ld="-s -w"
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X $pkg.gitVersion=$kv -X $pkg.gitMajor=$kmaj -X $pkg.gitMinor=$kmin"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$kdate"
    [[ -n $kcommit ]] && ld+=" -X $pkg.gitCommit=$kcommit"
  done
  echo "$ld"
}

# build_kube <name> <package> <VAR>: kubelab or kube-controller-manager into
# $CACHE/kube/<hash>/<name>; prints VAR=<path>.
build_kube() {
  local name=$1 pkg=$2 var=$3 h out t0 ld
  h=$(key "$HERE/go.mod" "$HERE/go.sum" "$HERE/main.go")
  out="$CACHE/kube/$h/$name"
  if [[ -x $out ]]; then
    echo "$name: cached $out" >&2
    touch -c "$(dirname "$out")" # mark as recently used (see prune)
  else
    ld=$(kube_ldflags)
    echo "$name: building $(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$HERE/go.mod") -> $out (this takes minutes on a cold Go build cache)" >&2
    t0=$(now)
    go_build "$out" "$HERE" "$ld" "$pkg"
    echo "$name: built in $(since "$t0") s" >&2
    prune "$CACHE/kube"
  fi
  echo "$var=$out"
}

build_kubelab() { build_kube kubelab . KUBELAB_BIN; }
build_kcm() { build_kube kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager KCM_BIN; }

build_helm() {
  local h out t0 hv cgv cmaj cmin ld
  h=$(key "$HERE/go.mod" "$HERE/go.sum")
  out="$CACHE/helm/$h/helm"
  if [[ -x $out ]]; then
    echo "helm: cached $out" >&2
    touch -c "$(dirname "$out")"
  else
    hv=$(awk '$1=="helm.sh/helm/v3" {print $2; exit}' "$HERE/go.mod")
    cgv=$(awk '$1=="k8s.io/client-go" {print $2; exit}' "$HERE/go.mod")
    # as in helm's Makefile: default capabilities = client-go v0.X -> Kubernetes v1.X
    cmaj=${cgv#v}; cmaj=$(( ${cmaj%%.*} + 1 ))
    cmin=${cgv#v*.}; cmin=${cmin%%.*}
    ld="-s -w -X helm.sh/helm/v3/internal/version.version=$hv -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    ld+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$cmaj -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$cmin"
    ld+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$cmaj -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$cmin"
    echo "helm: building $hv -> $out" >&2
    t0=$(now)
    go_build "$out" "$HERE" "$ld" helm.sh/helm/v3/cmd/helm
    echo "helm: built in $(since "$t0") s" >&2
    prune "$CACHE/helm"
  fi
  echo "HELM_BIN=$out"
}

case "$WHAT" in
  all) build_kubelab; build_kcm; build_helm ;;
  kube) build_kubelab; build_kcm ;;
  kubelab) build_kubelab ;;
  kcm) build_kcm ;;
  helm) build_helm ;;
esac
