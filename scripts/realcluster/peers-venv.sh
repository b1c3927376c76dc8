#!/bin/sh
# The peers' venv (scripts/realcluster/peers-requirements.txt): made in a fixed place, reused while
# the requirements file and the interpreter are unchanged (their hash is kept beside it), and its
# python's path printed on stdout (everything else goes to stderr). Needs the package registry
# when it (re)makes the venv: run it before entering the cluster's network namespace.
#
#   PY=$(sh scripts/realcluster/peers-venv.sh)
#
# KUBER_PEERS_VENV overrides the place (default ~/.cache/kuber-exec/peers-venv); PYTHON the
# interpreter the venv is made from (default python3).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
requirements="$here/peers-requirements.txt"
venv="${KUBER_PEERS_VENV:-$HOME/.cache/kuber-exec/peers-venv}"
python="${PYTHON:-python3}"

# What decides the venv: the pinned file and the interpreter's version.
stamp=$({ cat "$requirements"; "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)

mkdir -p "$(dirname "$venv")"
# Two callers at once: the second waits for the first's venv rather than racing it.
exec 9>"$venv.lock"
flock 9

if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.requirements-sha256" 2>/dev/null || true)" = "$stamp" ]; then
    echo "$venv/bin/python"
    exit 0
fi

echo "peers-venv: making $venv" >&2
rm -rf "$venv"
"$python" -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
# Written last: a venv whose install failed is made again next time.
echo "$stamp" >"$venv/.requirements-sha256"
echo "$venv/bin/python"
