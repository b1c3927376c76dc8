#!/usr/bin/env bash
# Build a current Kubernetes test cluster from Go modules: kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kubectl from k8s.io/kubernetes, etcd from go.etcd.io/etcd/server/v3
# (both through the build module scripts/realcluster/k8s-<minor>/, whose go.mod and go.sum pin
# every version), and containerd 2 from github.com/containerd/containerd/v2 (through
# scripts/realcluster/containerd-<minor>/). runc stays Debian's.
#
# Usage: build-modules.sh 1.37
#
# Everything goes under one fixed place keyed by version: the binaries in
# $KUBER_REALCLUSTER_CACHE (default ~/.cache/kuber-exec/realcluster/v<version>)/bin, Go's module and
# build caches in ~/.cache/kuber-exec/go (KUBER_GO_CACHE), shared by every version so that a
# second version rebuilds only what differs. A second run with the binaries present does nothing.
#
# Runs OUTSIDE the test network namespace: it needs the Go module proxy.
set -euo pipefail

MINOR=${1:?usage: build-modules.sh MINOR (e.g. 1.37)}
HERE=$(cd "$(dirname "$0")" && pwd)
MODULE=$HERE/k8s-$MINOR
[ -f "$MODULE/go.mod" ] || { echo "build: no build module $MODULE" >&2; exit 2; }
# The Kubernetes release is the one the build module requires (one release per module).
VERSION=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$MODULE/go.mod")
[ -n "$VERSION" ] || { echo "build: $MODULE/go.mod requires no k8s.io/kubernetes" >&2; exit 2; }
CONTAINERD_MODULE=$HERE/containerd-$MINOR
CACHE=${KUBER_REALCLUSTER_CACHE:-$HOME/.cache/kuber-exec/realcluster/$VERSION}
BIN=$CACHE/bin
GO_CACHE=${KUBER_GO_CACHE:-$HOME/.cache/kuber-exec/go}
JOBS=${KUBER_REALCLUSTER_JOBS:-$(nproc)}
KUBE=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

have_all() {
  for c in "${KUBE[@]}" etcd containerd containerd-shim-runc-v2; do
    [ -x "$BIN/$c" ] || return 1
  done
  "$BIN/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes $VERSION"
}

# runc, openssl, iproute2 and the rest come from Debian as for 1.20, cached binaries or not.
bash "$HERE/install-deps.sh" --runtime-only

if have_all; then
  echo "build: cached binaries in $BIN"
  exit 0
fi

command -v go >/dev/null || { echo "build: no go on PATH (the polyglot machine has Go 1.26)" >&2; exit 1; }

export GOMODCACHE=$GO_CACHE/mod GOCACHE=$GO_CACHE/build GOTOOLCHAIN=local GOFLAGS=-mod=mod
export CGO_ENABLED=0
mkdir -p "$BIN" "$GOMODCACHE" "$GOCACHE"
start=$(date +%s)

minor=${VERSION#v1.}
minor=${minor%%.*}
ldflags="-s -w"
for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X $p.gitVersion=$VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

cd "$MODULE"
for c in "${KUBE[@]}"; do
  t=$(date +%s)
  echo "build: go build -p $JOBS $c ($VERSION)"
  go build -p "$JOBS" -trimpath -ldflags "$ldflags" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c"
  echo "build: $c in $(( $(date +%s) - t )) s"
done
t=$(date +%s)
go build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$BIN/etcd" ./etcd
echo "build: etcd in $(( $(date +%s) - t )) s"

cd "$CONTAINERD_MODULE"
t=$(date +%s)
# No cgo: the btrfs and devmapper snapshotters need it and the cluster uses overlayfs only.
tags="no_btrfs no_devmapper no_zfs"
go build -p "$JOBS" -trimpath -tags "$tags" -ldflags "-s -w" -o "$BIN/containerd" \
  github.com/containerd/containerd/v2/cmd/containerd
go build -p "$JOBS" -trimpath -tags "$tags" -ldflags "-s -w" -o "$BIN/containerd-shim-runc-v2" \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
go build -p "$JOBS" -trimpath -tags "$tags" -ldflags "-s -w" -o "$BIN/ctr" \
  github.com/containerd/containerd/v2/cmd/ctr
echo "build: containerd in $(( $(date +%s) - t )) s"

have_all || { echo "build: binaries missing or wrong version after build" >&2; exit 1; }
echo "build: done in $(( $(date +%s) - start )) s: $BIN"
