"""The benchmark's sandbox API server, in a process of its own.

Serves :func:`demo_cluster` on loopback, prints one JSON line (``url``, ``kubeconfig``, the ready
``pod`` of Deployment ``web``) on stdout, then serves until its stdin reaches end of file (the
parent closed it, or died): the server never outlives the benchmark. Leaving ``serve_sandbox``
kills and reaps every process the pods started.

Its own process so that the clients being measured do not share a GIL with the server.
"""

from __future__ import annotations

import json
import os
import sys

import trio

from kuber_exec_sandbox import demo_cluster, serve_sandbox


async def serve() -> None:
    cluster = demo_cluster()
    async with serve_sandbox(cluster) as sandbox:
        web = cluster.deployment("demo", "web")
        assert web is not None
        pod = next(p.name for p in cluster.pods_of(web) if p.ready)
        ready = {"url": sandbox.url, "kubeconfig": str(sandbox.kubeconfig_path), "pod": pod}
        print(json.dumps(ready), flush=True)
        # A worker thread blocks on stdin; its end (EOF) ends the server.
        await trio.to_thread.run_sync(_wait_for_eof, abandon_on_cancel=True)


def _wait_for_eof() -> None:
    while os.read(sys.stdin.fileno(), 4096):
        pass


if __name__ == "__main__":
    trio.run(serve)
