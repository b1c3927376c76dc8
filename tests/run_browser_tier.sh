#!/bin/sh
# The browser tier: the whole pytest process, the servers its tests start and the headless
# Chromium they drive share one fresh network namespace that has nothing but loopback.
# Needs root (unshare --net). Extra arguments go to pytest, e.g. tests/docs/test_site_browser.py.
set -eu
cd "$(dirname "$0")/.."
exec unshare --net sh -c 'ip link set lo up && exec .venv/bin/pytest -m browser -p no:cacheprovider "$@"' sh "$@"
