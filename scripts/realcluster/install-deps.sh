#!/usr/bin/env bash
# Install what the real-cluster tier needs from Debian (outside any network namespace:
# this is the one step, with the build, that talks to the package registry).
set -euo pipefail

# --runtime-only: what a cluster built from Go modules (build-modules.sh) still takes from Debian:
# runc and the tools; no Go 1.19, etcd, containerd or Kubernetes source.
SRC_LIST=/etc/apt/sources.list.d/kuber-exec-bookworm-src.sources
RUNTIME_PKGS=(runc busybox-static openssl iproute2 util-linux procps)
if [ "${1:-}" = --runtime-only ]; then
  PKGS=("${RUNTIME_PKGS[@]}")
else
  PKGS=(
    "${RUNTIME_PKGS[@]}" golang-1.19-go etcd-server etcd-client containerd
    golang-github-modern-go-reflect2-dev dpkg-dev
  )
fi

need_install=0
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || need_install=1
done
need_src=0
[ -f "$SRC_LIST" ] || [ "${1:-}" = --runtime-only ] || need_src=1

if [ "$need_src" = 1 ]; then
  # The deb-src entry reuses the mirror this machine's apt already uses for bookworm: the
  # project names no package host of its own.
  mirror=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && [ "$f" != "$SRC_LIST" ] || continue
    mirror=$(awk '/^URIs:/ {u = $2} /^Suites:/ && / bookworm( |$)/ {print u; exit}' "$f")
    [ -z "$mirror" ] || break
  done
  if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
    mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list)
  fi
  if [ -z "$mirror" ]; then
    echo "install-deps: no bookworm apt source to derive a deb-src entry from" >&2
    exit 1
  fi
  printf 'Types: deb-src\nURIs: %s\nSuites: bookworm\nComponents: main\nSigned-By: %s\n' \
    "$mirror" /usr/share/keyrings/debian-archive-keyring.gpg >"$SRC_LIST"
fi

if [ "$need_install" = 1 ] || [ "$need_src" = 1 ] || [ "${KUBER_REALCLUSTER_APT_UPDATE:-0}" = 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
fi
if [ "$need_install" = 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  # containerd's postinst may try to start it through systemd; that is harmless when there is none.
  apt-get install -y -q --no-install-recommends "${PKGS[@]}"
fi
# The Debian containerd package may have started a system containerd; this tier runs its own.
echo "install-deps: ok"
