"""The ``*.channel.k8s.io`` subprotocol family and its negotiation (docs/protocol.md).

Servers pick the first protocol in the client's order that they support; a client must check the
answer against what it offered, and always offer at least one (an empty offer makes the legacy
server answer with an empty ``Sec-WebSocket-Protocol`` header, which strict clients reject).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

from ._errors import ExecError, ExecErrorCode, ExecProtocolError

__all__ = [
    "ALL_SUBPROTOCOLS",
    "DEFAULT_SUBPROTOCOLS",
    "Subprotocol",
    "accept_subprotocol",
    "choose_subprotocol",
    "parse_subprotocol_header",
    "server_subprotocols",
    "validate_subprotocols",
]


class Subprotocol(enum.StrEnum):
    """One member of the remote-command WebSocket subprotocol family."""

    V5 = "v5.channel.k8s.io"
    V4 = "v4.channel.k8s.io"
    V4_BASE64 = "v4.base64.channel.k8s.io"
    BASE64 = "base64.channel.k8s.io"
    LEGACY = "channel.k8s.io"

    @property
    def is_base64(self) -> bool:
        """Text frames: ``'0'+channel`` then padded standard base64 (docs/protocol.md)."""
        return self in (Subprotocol.V4_BASE64, Subprotocol.BASE64)

    @property
    def has_structured_status(self) -> bool:
        """v4 and v5 send a ``metav1.Status`` on channel 3; older ones plain text on failure."""
        return self in (Subprotocol.V5, Subprotocol.V4, Subprotocol.V4_BASE64)

    @property
    def can_close_stdin(self) -> bool:
        """Only v5 has the ``[255, 0]`` stdin close message (docs/protocol.md)."""
        return self is Subprotocol.V5


#: What kuber-exec offers by default: v5 on 1.30+ clusters, v4 through the legacy path elsewhere.
DEFAULT_SUBPROTOCOLS: tuple[Subprotocol, ...] = (Subprotocol.V5, Subprotocol.V4)
#: Every member, newest first.
ALL_SUBPROTOCOLS: tuple[Subprotocol, ...] = tuple(Subprotocol)


def validate_subprotocols(values: object) -> tuple[Subprotocol, ...]:
    """A user's offer, in order: ``Subprotocol`` members or their names (``"channel.k8s.io"``),
    at least one (an empty offer gets an empty header from legacy servers), none twice.

    Raises:
        ExecError: ``EXEC_INVALID`` naming the value at fault and the known subprotocols.
    """
    known = ", ".join(protocol.value for protocol in Subprotocol)
    if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
        raise ExecError(
            ExecErrorCode.INVALID,
            f"subprotocols must be a non-empty sequence of exec subprotocols ({known})",
        )
    offer: list[Subprotocol] = []
    for value in values:
        if not isinstance(value, str) or value not in Subprotocol._value2member_map_:
            raise ExecError(
                ExecErrorCode.INVALID, f"unknown exec subprotocol {value!r}; known: {known}"
            )
        protocol = Subprotocol(value)
        if protocol in offer:
            raise ExecError(ExecErrorCode.INVALID, f"exec subprotocol {value!r} is offered twice")
        offer.append(protocol)
    return tuple(offer)


def parse_subprotocol_header(values: Iterable[str]) -> list[str]:
    """Split ``Sec-WebSocket-Protocol`` header values (comma separated, maybe repeated)."""
    return [token.strip() for value in values for token in value.split(",") if token.strip()]


def accept_subprotocol(offered: Sequence[Subprotocol], answered: str | None) -> Subprotocol:
    """Client side: the subprotocol the server chose, checked against the offer.

    Raises:
        ExecProtocolError: the server answered none, or one that was not offered.
    """
    if not answered:
        raise ExecProtocolError("the server accepted the WebSocket without a subprotocol")
    for protocol in offered:
        if protocol.value == answered:
            return protocol
    raise ExecProtocolError(f"the server chose subprotocol {answered!r}, which was not offered")


def choose_subprotocol(
    client_offer: Sequence[str], supported: Iterable[Subprotocol]
) -> Subprotocol | None:
    """Server side: the first protocol in the client's order that the server supports.

    An empty offer means the legacy binary protocol (answered with an empty header, as real
    servers do). ``None`` means no match: a real server answers ``403`` with an empty body.
    """
    supported_values = {protocol.value: protocol for protocol in supported}
    if not client_offer:
        return Subprotocol.LEGACY if Subprotocol.LEGACY.value in supported_values else None
    for token in client_offer:
        if token in supported_values:
            return supported_values[token]
    return None


#: What the container runtime's streaming server accepts on the legacy path (docs/protocol.md).
LEGACY_SERVER_SUBPROTOCOLS: tuple[Subprotocol, ...] = (
    Subprotocol.V4,
    Subprotocol.V4_BASE64,
    Subprotocol.BASE64,
    Subprotocol.LEGACY,
)


def server_subprotocols(
    client_offer: Sequence[str], *, v5_enabled: bool
) -> tuple[Subprotocol, ...]:
    """Server side: which protocols the answering server supports for this offer (docs/protocol.md).

    A 1.30+ API server (``v5_enabled``) terminates the WebSocket itself when the offer contains
    ``v5.channel.k8s.io`` anywhere, and then accepts only v5; every other request is proxied to the
    runtime's streaming server, which knows v4, v4.base64, base64 and legacy, but not v5.
    Feed the result to :func:`choose_subprotocol`.
    """
    if v5_enabled and Subprotocol.V5.value in client_offer:
        return (Subprotocol.V5,)
    return LEGACY_SERVER_SUBPROTOCOLS
