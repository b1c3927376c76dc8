#!/usr/bin/env bash
# Build Kubernetes v1.20.2 (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet)
# from Debian 12's `kubernetes` source package, offline, in GOPATH mode, into a cache directory
# outside the repository. A second run with the binaries present does nothing.
#
# Runs OUTSIDE the test network namespace: it needs the Debian package registry (apt-get source).
#
# Environment:
#   KUBER_REALCLUSTER_CACHE   cache root (default ~/.cache/kuber-exec/realcluster/v1.20.2)
#   KUBER_REALCLUSTER_JOBS    go build -p (default: number of cores)
#
# build.sh MINOR picks the release (default: $KUBER_REALCLUSTER_K8S, else 1.20); any other than
# 1.20 is built from Go modules by build-modules.sh.
set -euo pipefail

MINOR=${1:-${KUBER_REALCLUSTER_K8S:-1.20}}
if [ "$MINOR" != 1.20 ]; then
  exec bash "$(dirname "$0")/build-modules.sh" "$MINOR"
fi

VERSION=v1.20.2
CACHE=${KUBER_REALCLUSTER_CACHE:-$HOME/.cache/kuber-exec/realcluster/$VERSION}
BIN=$CACHE/bin
JOBS=${KUBER_REALCLUSTER_JOBS:-$(nproc)}
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
HERE=$(cd "$(dirname "$0")" && pwd)

have_all() {
  for c in "${COMPONENTS[@]}"; do [ -x "$BIN/$c" ] || return 1; done
  "$BIN/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes $VERSION"
}

# Debian's etcd, containerd and runc run the cluster even when the binaries are cached: install
# (or find, at no cost) them first.
bash "$HERE/install-deps.sh"

if have_all; then
  echo "build: cached binaries in $BIN"
  exit 0
fi

start=$(date +%s)
mkdir -p "$CACHE/src" "$BIN"
cd "$CACHE/src"
if ! ls kubernetes_*.orig.tar.gz >/dev/null 2>&1; then
  apt-get source --download-only kubernetes
fi
ORIG=$(ls kubernetes_*.orig.tar.gz | head -n1)
case "$ORIG" in
  *really1.20.2*) ;;
  *) echo "build: unexpected source package $ORIG (want the 1.20.2 tree)" >&2; exit 1 ;;
esac

TREE=$CACHE/src/kubernetes-1.20.2
if [ ! -f "$TREE/.kuber-exec-prepared" ]; then
  rm -rf "$TREE"
  tar xzf "$ORIG"
  [ -d "$TREE/vendor" ] || { echo "build: $TREE has no vendor/" >&2; exit 1; }

  # reflect2 1.0.1 (vendored) breaks on Go >= 1.18; Debian ships 1.0.2.
  REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2
  [ -f "$REFLECT2/go_above_118.go" ] || { echo "build: reflect2 >= 1.0.2 not found at $REFLECT2" >&2; exit 1; }
  rm -rf "$TREE/vendor/github.com/modern-go/reflect2"
  cp -r "$REFLECT2" "$TREE/vendor/github.com/modern-go/reflect2"
  touch "$TREE/.kuber-exec-prepared"
fi

export GOROOT=/usr/lib/go-1.19
export PATH=$GOROOT/bin:$PATH
export GOPATH=$CACHE/gopath
export GOCACHE=$CACHE/gocache
export GO111MODULE=off
export GOFLAGS=
export GOPROXY=off
mkdir -p "$GOPATH/src/k8s.io" "$GOCACHE"
ln -sfn "$TREE" "$GOPATH/src/k8s.io/kubernetes"
cd "$GOPATH/src/k8s.io/kubernetes"

PKG=k8s.io/kubernetes
OPENAPI_OUT=pkg/generated/openapi/zz_generated.openapi.go
if [ ! -f "$OPENAPI_OUT" ]; then
  echo "build: generating $OPENAPI_OUT"
  go build -p "$JOBS" -o "$CACHE/tools/openapi-gen" "$PKG/vendor/k8s.io/kube-openapi/cmd/openapi-gen"
  # The packages that ask for OpenAPI definitions: a `+k8s:openapi-gen=` tag in a Go file, in the
  # tree proper and in staging (named by its vendor/ path), not the code-generator or
  # sample-apiserver examples.
  dirs=$(
    find -H . \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune -o -type f -name '*.go' -print \
      | xargs grep -l '^// *+k8s:openapi-gen=' \
      | sed -e 's|^\./||' -e 's|^staging/src/|vendor/|' -e 's|/[^/]*$||' \
      | grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' \
      | LC_ALL=C sort -u | sed "s|^|$PKG/|" | paste -sd, -
  )
  "$CACHE/tools/openapi-gen" \
    --logtostderr -v 1 \
    -i "$dirs" \
    -p "$PKG/pkg/generated/openapi" \
    -O zz_generated.openapi \
    -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    -r "$CACHE/tools/openapi-violations.report"
  [ -f "$OPENAPI_OUT" ] || { echo "build: openapi-gen wrote no $OPENAPI_OUT" >&2; exit 1; }
fi

ldflags=()
for p in vendor/k8s.io/client-go/pkg/version vendor/k8s.io/component-base/version; do
  ldflags+=(
    "-X" "$PKG/$p.gitVersion=$VERSION"
    "-X" "$PKG/$p.gitMajor=1"
    "-X" "$PKG/$p.gitMinor=20"
    "-X" "$PKG/$p.gitTreeState=clean"
    "-X" "$PKG/$p.buildDate=2021-01-13T00:00:00Z"
  )
done

targets=()
for c in "${COMPONENTS[@]}"; do targets+=("$PKG/cmd/$c"); done
echo "build: go build -p $JOBS ${COMPONENTS[*]}"
CGO_ENABLED=0 go build -p "$JOBS" -ldflags "-s -w ${ldflags[*]}" -o "$BIN/" "${targets[@]}"

have_all || { echo "build: binaries missing or wrong version after build" >&2; exit 1; }
echo "build: done in $(( $(date +%s) - start )) s: $BIN"
