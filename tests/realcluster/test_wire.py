"""What the real server does on the wire, per release: the facts docs/protocol.md reports.

Seen with a plain WebSocket client (``wire.py``), not through the library, so each fact is the
server's own: which subprotocol it picks for an offer, the first message, message sizes, the
Status on channel 3 for each kind of end, who closes first and with which code, the answer to a
ping, and the answer to an offer of nothing it speaks. ``current`` is 1.30 and later (v5).
"""

from __future__ import annotations

from typing import Any

import pytest

from .kube import Cluster
from .wire import Refusal, Session, run

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"


def no_v5_here(cluster: Cluster, server_minor: int) -> None:
    """Before 1.30 there is no v5 path: an offer of v5 alone is refused with an empty 403."""
    assert server_minor < 30
    answer = run(cluster, ["true"], protocols=[V5])
    assert isinstance(answer, Refusal)
    assert (answer.status, answer.body) == (403, b"")


def session(cluster: Cluster, command: list[str], protocols: list[str], **kw: Any) -> Session:
    answer = run(cluster, command, protocols=protocols, **kw)
    assert isinstance(answer, Session), answer
    return answer


@pytest.mark.parametrize(
    "offer", [[V5, V4], [V4, V5], [V4], ["channel.k8s.io"]], ids=["v5,v4", "v4,v5", "v4", "v1"]
)
def test_the_subprotocol_chosen_for_each_offer(
    cluster: Cluster, workloads: Any, server_minor: int, offer: list[str]
) -> None:
    answer = session(cluster, ["true"], offer, ping=True)
    # From 1.30, v5 anywhere in the offer wins: the v5 path takes the request whatever the
    # order; otherwise the first protocol the legacy path speaks.
    v5_path = server_minor >= 30 and V5 in offer
    expected = V5 if v5_path else next(p for p in offer if p != V5)
    assert answer.subprotocol == expected
    # The first message is an empty one on stdout, the lowest channel asked for.
    assert answer.messages[0] == (1, b"")
    # Pings are answered; the server closes first, with 1000 and no reason.
    assert answer.pong_seconds is not None
    assert (answer.close_code, answer.close_reason, answer.server_closed_first) == (1000, "", True)
    if expected == "channel.k8s.io":
        assert answer.channel(3) == b""  # no Status at all on success before v4
    elif expected == V5:
        assert answer.status == {"metadata": {}, "status": "Success"}
    else:
        assert answer.status["status"] == "Success"


def test_an_offer_of_nothing_the_server_speaks_is_an_empty_403(
    cluster: Cluster, workloads: Any
) -> None:
    answer = run(cluster, ["true"], protocols=["nonsense.k8s.io"])
    assert isinstance(answer, Refusal)
    assert (answer.status, answer.body) == (403, b"")


@pytest.mark.parametrize("protocol", [V5, V4])
@pytest.mark.parametrize(("script", "code"), [("exit 3", 3), ("kill -TERM $$", 143)])
def test_the_status_of_a_non_zero_exit(
    cluster: Cluster, workloads: Any, server_minor: int, protocol: str, script: str, code: int
) -> None:
    if protocol == V5 and server_minor < 30:
        no_v5_here(cluster, server_minor)
        return
    status = session(cluster, ["sh", "-c", script], [protocol]).status
    assert (status["status"], status["reason"]) == ("Failure", "NonZeroExitCode")
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": str(code)}]
    assert f"exit code {code}" in status["message"]


@pytest.mark.parametrize("protocol", [V5, V4])
def test_the_status_of_a_command_not_found(
    cluster: Cluster, workloads: Any, server_minor: int, protocol: str
) -> None:
    if protocol == V5 and server_minor < 30:
        no_v5_here(cluster, server_minor)
        return
    status = session(cluster, ["/no/such/kx-command"], [protocol]).status
    assert (status["status"], status["reason"], status["code"]) == ("Failure", "InternalError", 500)
    assert "error executing command in container" in status["message"]
    assert "/no/such/kx-command" in status["message"]
    assert "no such file or directory" in status["message"]


@pytest.mark.parametrize("protocol", [V5, V4])
def test_output_comes_in_messages_of_at_most_32_kib(
    cluster: Cluster, workloads: Any, server_minor: int, protocol: str
) -> None:
    if protocol == V5 and server_minor < 30:
        no_v5_here(cluster, server_minor)
        return
    answer = session(cluster, ["head", "-c", "1000000", "/dev/zero"], [protocol])
    sizes = answer.sizes(1)
    assert sum(sizes) == 1_000_000
    # At most 32 KiB each, boundaries as the server's reads fell (1.37: 32 KiB on v4, mixed
    # 4-28 KiB on v5; 1.20: 4-28 KiB): never depend on them.
    assert max(sizes) <= 32 * 1024
    assert answer.status["status"] == "Success"
