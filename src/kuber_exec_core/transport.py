"""What every transport of the exec stream reports the same way, whichever library moves its
bytes: the size limit on a server's message and the reason given when one exceeds it, an
exception chain said in one line, and a logger that keeps request headers out of logs.

The async layer's seam (``kuber_exec_anyio.transport``) and the WebSocket package
(``kuber_exec_websocket``) both read these, so a binding's message and the seam's default agree.
"""

from __future__ import annotations

import re

__all__ = [
    "CLOSE_MESSAGE_TOO_BIG",
    "MAX_SERVER_MESSAGE_BYTES",
    "describe_error",
    "message_too_big",
]

#: Real servers send ≤ 32 KiB per message and kill sessions over 32 MiB; accept up to that.
MAX_SERVER_MESSAGE_BYTES = 32 * 1024 * 1024

#: The WebSocket close code for a message over the receiver's limit (RFC 6455 7.4.1).
CLOSE_MESSAGE_TOO_BIG = 1009

# The count an exception group adds to its message ("... failed (1 sub-exception)").
_SUB_EXCEPTIONS = re.compile(r"\s*\(\d+ sub-exceptions?\)$")


def message_too_big(limit: int) -> str:
    """The reason a transport gives when it closed the connection (1009) because a server
    message exceeded ``limit`` bytes."""
    size = f"{limit // (1024 * 1024)} MiB" if limit % (1024 * 1024) == 0 else f"{limit} bytes"
    return (
        f"a server message exceeded the {size} message limit: the connection was closed "
        f"with {CLOSE_MESSAGE_TOO_BIG} (message too big)"
    )


def describe_error(error: BaseException) -> str:
    """``Type: message / cause's message … (InnermostType)`` for ``error`` and its causes.

    Transport wrappers often carry an empty or generic message over the one that matters
    (httpx's ``ConnectError`` over ``ssl.SSLCertVerificationError``; trio's "all attempts to
    connect failed" group over ``ConnectionRefusedError``). Exception groups are searched too:
    their single leaf, or the first one. None of these messages holds a credential: they come
    from the socket and TLS layers, never from request headers.
    """
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(chain) < 6:
        seen.add(id(current))
        chain.append(current)
        if isinstance(current, BaseExceptionGroup) and current.exceptions:
            current = current.exceptions[0]
        else:
            current = current.__cause__ or current.__context__
    parts: list[str] = []
    for link in chain:
        text = _SUB_EXCEPTIONS.sub("", str(link)).strip()
        if not text or any(text in part for part in parts):
            continue
        # A wrapper that repeats its cause's text and adds to it replaces the shorter one.
        parts = [part for part in parts if part not in text] + [text]
    outer, inner = type(chain[0]).__name__, type(chain[-1]).__name__
    cause = f" ({inner})" if inner != outer else ""
    return f"{outer}: {' / '.join(parts) or 'no details'}{cause}"
