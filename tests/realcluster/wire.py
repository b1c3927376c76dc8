"""What the real server puts on the wire for an exec, seen by a plain WebSocket client.

The library under test hides the wire (that is its job); these helpers look at it directly with
``websockets``' threaded client so the tests can state what a given release does: the
subprotocol it picks, the messages in order (channel and size), the Status on channel 3, the
close code and who closed first, the answer to a ping, and the HTTP answer of a refused upgrade.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from .kube import Cluster, credentials, get_json


@dataclass
class Refusal:
    """An upgrade the server refused: its HTTP status and body."""

    status: int
    body: bytes

    @property
    def status_json(self) -> dict[str, Any] | None:
        try:
            parsed = json.loads(self.body)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None


@dataclass
class Session:
    """One exec as the wire showed it."""

    subprotocol: str | None
    #: (channel, payload) of every server message, in order.
    messages: list[tuple[int, bytes]] = field(default_factory=list)
    close_code: int | None = None
    close_reason: str = ""
    #: True when the server's Close arrived before we sent ours.
    server_closed_first: bool | None = None
    pong_seconds: float | None = None

    def channel(self, number: int) -> bytes:
        return b"".join(payload for channel, payload in self.messages if channel == number)

    @property
    def status(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.channel(3))
        return parsed

    def sizes(self, number: int) -> list[int]:
        return [len(payload) for channel, payload in self.messages if channel == number]


def shell_pod(cluster: Cluster) -> str:
    """The name of the ``shell`` Deployment's live pod."""
    pods = get_json(cluster, "pods", "-n", cluster.main_ns, "-l", "app=shell,tier=exec,!role")
    live = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    return str(live[0]["metadata"]["name"])


def exec_url(cluster: Cluster, pod: str, command: list[str], **flags: bool) -> str:
    query = [("command", part) for part in command]
    query += [(name, "true") for name, on in flags.items() if on]
    server = str(cluster.info["apiserver"]).replace("https://", "wss://")
    return f"{server}/api/v1/namespaces/{cluster.main_ns}/pods/{pod}/exec?{urlencode(query)}"


def run(cluster: Cluster, command: list[str], **options: Any) -> Session | Refusal:
    """:func:`exchange` in a thread of its own, bounded: ``websockets``' threaded client can
    wait for ever on a connection whose handshake timed out (its reader thread is joined
    unbounded), so a server that never answers fails the test instead of hanging the run.

    An exchange that got no answer at all is tried once more: now and then (twice in many
    full runs, both on 1.20) the server leaves one exec without any answer, which is not what
    these tests ask about; two in a row fail the test."""
    limit = 2 * float(options.get("timeout", 30)) + 5
    for _attempt in range(2):
        outcome: list[Session | Refusal | BaseException] = []

        def work(outcome: list[Session | Refusal | BaseException] = outcome) -> None:
            try:
                outcome.append(exchange(cluster, command, **options))
            except BaseException as error:  # handed to the test's thread below
                outcome.append(error)

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        worker.join(limit)
        if outcome:
            break
        print(f"wire: the exec of {command} got no answer within {limit:.0f} s; once more")
    else:
        raise AssertionError(f"the exec got no answer within {limit:.0f} s, twice: {command}")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def exchange(
    cluster: Cluster,
    command: list[str],
    *,
    protocols: list[str],
    user: str = "admin",
    stdin: list[bytes] | None = None,
    tty: bool = False,
    ping: bool = False,
    timeout: float = 30,
) -> Session | Refusal:
    """Exec ``command`` in the shell pod over a raw WebSocket offering ``protocols``; send the
    ``stdin`` messages (already framed: channel byte first), ping once if asked, and read until
    the server closes. A refused upgrade is returned as a :class:`Refusal`."""
    context, headers = credentials(cluster, user)
    url = exec_url(
        cluster,
        shell_pod(cluster),
        command,
        stdin=stdin is not None,
        stdout=True,
        stderr=not tty,
        tty=tty,
    )
    try:
        socket = connect(
            url,
            ssl=context,
            additional_headers=headers,
            subprotocols=protocols,  # type: ignore[arg-type]
            open_timeout=timeout,
            max_size=None,
            compression=None,
        )
    except InvalidStatus as refused:
        return Refusal(refused.response.status_code, bytes(refused.response.body or b""))
    session = Session(socket.subprotocol)
    with socket:
        if ping:
            started = time.monotonic()
            if socket.ping().wait(timeout):
                session.pong_seconds = time.monotonic() - started
        for message in stdin or []:
            socket.send(message)
        try:
            while True:
                data = socket.recv(timeout)
                raw = data.encode() if isinstance(data, str) else data
                session.messages.append((raw[0], raw[1:]) if raw else (-1, b""))
        except ConnectionClosed:
            pass
        received = socket.protocol.close_rcvd
        session.close_code = received.code if received else None
        session.close_reason = received.reason if received else ""
        session.server_closed_first = socket.protocol.close_rcvd_then_sent
    return session
