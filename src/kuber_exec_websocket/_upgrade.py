"""The upgrade: the request (:func:`open_protocol`) and what its answer means
(:class:`UpgradeAnswer`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import NoReturn

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidHandshake, InvalidStatus
from websockets.typing import LoggerLike
from websockets.typing import Subprotocol as WebSocketSubprotocol
from websockets.uri import WebSocketURI, parse_uri

from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.kube import exec_upgrade_error
from kuber_exec_core.transport import describe_error

from ._limits import MAX_RESPONSE_HEAD, MAX_SERVER_MESSAGE_BYTES

__all__ = ["UpgradeAnswer", "open_protocol", "upgrade_failed", "wire_subprotocol"]

# A path and query that urllib would take as they are: RFC 3986's characters, without the
# parameters (";"), the fragment ("#"), brackets, spaces and controls (which urllib drops).
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9\-._~%!$&'()*+,=:@/?]*")
_SWITCHING_PROTOCOLS = b"101"
#: Subprotocols whose names are no HTTP token: port-forward's tunnel has a "/", which
#: ``websockets`` refuses in ``Sec-WebSocket-Protocol`` (Go's servers and clients accept it).
#: Inside the parser each goes by a stand-in token; on the wire, and to our callers, by its name.
_STAND_INS = {"SPDY/3.1+portforward.k8s.io": "SPDY_3.1+portforward.k8s.io"}
_REAL_NAMES = {stand_in: name for name, stand_in in _STAND_INS.items()}


def wire_subprotocol(name: str | None) -> str | None:
    """The subprotocol's real name for what the parser negotiated (a stand-in, or itself)."""
    return _REAL_NAMES.get(name, name) if name is not None else None


def _to_stand_ins(head: bytes) -> bytes:
    for name, stand_in in _STAND_INS.items():
        head = head.replace(name.encode(), stand_in.encode())
    return head


def upgrade_failed(detail: str) -> ExecError:
    """The ``EXEC_FAILED`` error for an upgrade that got no usable answer: ``detail`` says
    what went wrong (a broken stream, an answer that is no WebSocket upgrade, no answer in
    time). A refused upgrade is the core's ``exec_upgrade_error`` instead."""
    return ExecError(ExecErrorCode.FAILED, f"The exec upgrade failed: {detail}")


def open_protocol(
    url: str,
    *,
    subprotocols: Sequence[str],
    headers: Iterable[tuple[str, str]],
    logger: LoggerLike,
    max_message_bytes: int = MAX_SERVER_MESSAGE_BYTES,
) -> tuple[ClientProtocol, WebSocketURI]:
    """A ``ClientProtocol`` for the upgrade to ``url`` (``http(s)://`` or ``ws(s)://``),
    offering ``subprotocols`` in order, with the request already queued (``headers``, the token
    among them, included), and the parsed URI to connect to.

    The protocol logs through ``logger``. ``websockets`` logs every handshake header at DEBUG,
    ``Authorization`` included, so ``logger`` must never pass DEBUG records on: both bindings
    give a :class:`~kuber_exec_anyio.transport.NoDebugLogger`.

    Raises:
        ExecError: ``EXEC_FAILED`` when the URL is not a WebSocket URL.
    """
    if url.startswith(("http://", "https://")):
        url = "ws" + url[len("http") :]
    try:
        uri = websocket_uri(url)
    except InvalidHandshake as error:
        raise upgrade_failed(describe_error(error)) from None
    protocol = ClientProtocol(
        uri,
        subprotocols=[WebSocketSubprotocol(_STAND_INS.get(name, name)) for name in subprotocols],
        max_size=max_message_bytes,
        logger=logger,
    )
    request = protocol.connect()
    if any(name in _STAND_INS for name in subprotocols):
        del request.headers["Sec-WebSocket-Protocol"]
        request.headers["Sec-WebSocket-Protocol"] = ", ".join(subprotocols)
    for name, value in headers:
        request.headers[name] = value
    protocol.send_request(request)
    return protocol, uri


def websocket_uri(url: str) -> WebSocketURI:
    """``parse_uri(url)``, with the server part (``ws://host:port``) parsed once per server.

    An exec URL is a server's base and a path of a thousand percent-encoded characters that
    changes with every exec; ``urllib``'s parse of the whole URL was ~30 us of each. A plain
    ASCII URL (no user information, parameters or fragment: what every exec URL is) is split
    at its path; anything else goes to ``parse_uri`` whole.

    Raises:
        InvalidURI: as ``parse_uri``.
    """
    scheme_end = url.find("://")
    path_start = url.find("/", scheme_end + 3) if scheme_end > 0 else -1
    if path_start < 0:
        return parse_uri(url)
    server, rest = url[:path_start], url[path_start:]
    if "@" in server or "?" in server or "#" in server or not _PLAIN_PATH.fullmatch(rest):
        return parse_uri(url)
    path, _, query = rest.partition("?")
    origin = _server_uri(server)
    return WebSocketURI(origin.secure, origin.host, origin.port, path, query)


@functools.lru_cache(maxsize=64)
def _server_uri(server: str) -> WebSocketURI:
    return parse_uri(server + "/")


class UpgradeAnswer:
    """The answer to the upgrade request, read from the bytes a binding hands it.

    A ``101`` response's head (up to its blank line) is judged by ``websockets``'
    ``ClientProtocol`` (the accept key, the subprotocol, no extensions); the bytes behind it
    are the server's first frames, handed back for :class:`~kuber_exec_websocket.ReceivedFrames`:
    the protocol never parses a frame, so nothing is parsed twice or copied into its buffer.
    Any other answer is the protocol's to read whole (a body with or without a length), and is
    reported as the seed maps a refused upgrade.
    """

    def __init__(self, protocol: ClientProtocol, subprotocols: Sequence[str]) -> None:
        """``subprotocols``: what the request offered, which a refusal's error names."""
        self._protocol = protocol
        self._subprotocols = tuple(subprotocols)
        self._head = bytearray()
        self._refused = False

    def receive_data(self, data: bytes | bytearray) -> bytes | None:
        """Take one read. ``None``: the answer is not whole yet; bytes (maybe empty): the
        upgrade was accepted, and these came right behind the response.

        Raises:
            ExecError: the seed's mapping of a refused upgrade (``exec_upgrade_error``);
                ``EXEC_FAILED`` for an answer that is no WebSocket upgrade.
        """
        if self._refused:
            self._protocol.receive_data(data)
            self._judge()
            return None
        head = self._head
        head += data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            if len(head) > MAX_RESPONSE_HEAD:
                raise upgrade_failed("the response's head is over 64 KiB")
            return None
        end += 4
        status_line = bytes(head[: head.find(b"\r\n")])
        fields = status_line.split(b" ", 2)
        if len(fields) >= 2 and fields[1] == _SWITCHING_PROTOCOLS:
            self._protocol.receive_data(_to_stand_ins(bytes(head[:end])))
            if not self._judge():
                raise upgrade_failed("an incomplete 101 response")
            rest = bytes(head[end:])
            self._head = bytearray()
            return rest
        self._refused = True
        self._protocol.receive_data(bytes(head))
        self._head = bytearray()
        self._judge()
        return None

    def receive_eof(self) -> NoReturn:
        """The stream ended before an accepted answer.

        Raises:
            ExecError: always: the refusal the answer holds, or ``EXEC_FAILED``.
        """
        if not self._refused and self._head:
            self._protocol.receive_data(bytes(self._head))
        self._protocol.receive_eof()
        self._judge()
        raise upgrade_failed("the server closed")

    def _judge(self) -> bool:
        # Whether the protocol has accepted the answer; raises when it has refused it.
        events = self._protocol.events_received()
        failure = self._protocol.handshake_exc
        if isinstance(failure, InvalidStatus):
            response = failure.response
            raise exec_upgrade_error(
                response.status_code, bytes(response.body or b""), self._subprotocols
            )
        if failure is not None:
            raise upgrade_failed(describe_error(failure))
        return bool(events)
