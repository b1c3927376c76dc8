"""The benchmark server's wire formats, pure: HTTP/1.1 request heads and WebSocket frames.

Only what ``fast_server.py`` needs: request heads of at most :data:`MAX_HEAD_BYTES` (bodies are
read by length and dropped), RFC 6455 server frames (never masked, never fragmented) and the
client frames it reads (always masked, at most :data:`MAX_CLIENT_FRAME_BYTES` of payload). Every
violation is a :class:`WireError`, after which the server closes the connection.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http
import struct
from collections.abc import Sequence
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs

__all__ = [
    "MAX_CLIENT_FRAME_BYTES",
    "MAX_HEAD_BYTES",
    "OP_BINARY",
    "OP_CLOSE",
    "OP_CONTINUATION",
    "OP_PING",
    "OP_PONG",
    "OP_TEXT",
    "ClientFrame",
    "FrameDecoder",
    "RequestHead",
    "WireError",
    "accept_token",
    "chunk",
    "close_frame",
    "frame",
    "http_response",
    "mask_frame",
    "parse_head",
]

MAX_HEAD_BYTES = 64 * 1024
#: What a real server reads at most per client frame (x/net/websocket's limit, docs/protocol.md).
MAX_CLIENT_FRAME_BYTES = 32 << 20
OP_CONTINUATION, OP_TEXT, OP_BINARY = 0x0, 0x1, 0x2
OP_CLOSE, OP_PING, OP_PONG = 0x8, 0x9, 0xA
_CONTROL_OPCODES = (OP_CLOSE, OP_PING, OP_PONG)
_DATA_OPCODES = (OP_CONTINUATION, OP_TEXT, OP_BINARY)
_WEBSOCKET_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WireError(Exception):
    """Malformed input: an HTTP ``status`` to answer with (0: just close)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@attrs.frozen
class RequestHead:
    """One parsed request head; header names are lower case, repeated headers kept in order."""

    method: str
    target: str
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, list[str]]

    def header(self, name: str) -> str:
        """Every value of ``name`` joined by commas, as HTTP allows ("" when absent)."""
        return ",".join(self.headers.get(name, ()))

    def tokens(self, name: str) -> set[str]:
        """The comma-separated, case-folded tokens of ``name`` (``Connection``, ``Upgrade``)."""
        return {token.strip().lower() for token in self.header(name).split(",") if token.strip()}

    @property
    def content_length(self) -> int:
        """The body's length (0 without one).

        Raises:
            WireError: a malformed length, or a chunked body (no GET sends one).
        """
        if "chunked" in self.tokens("transfer-encoding"):
            raise WireError("chunked request bodies are not supported", 411)
        text = self.header("content-length").strip()
        if not text:
            return 0
        if not text.isdigit():
            raise WireError(f"malformed Content-Length {text!r}", 400)
        return int(text)

    @property
    def wants_close(self) -> bool:
        """The client asked to close after this answer (``Connection: close``, or HTTP/1.0)."""
        return "close" in self.tokens("connection")


def parse_head(buffer: bytes | bytearray) -> tuple[RequestHead, int] | None:
    """The request head at the start of ``buffer`` and its length, or ``None`` if incomplete.

    Raises:
        WireError: a head over :data:`MAX_HEAD_BYTES`, or one that is not HTTP/1.1.
    """
    end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
    if end < 0:
        if len(buffer) > MAX_HEAD_BYTES:
            raise WireError("the request head is too large", 431)
        return None
    lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise WireError(f"malformed request line {lines[0][:80]!r}", 400)
    method, target, _version = parts
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise WireError(f"malformed header line {line[:80]!r}", 400)
        headers.setdefault(name.lower(), []).append(value.strip())
    split = urlsplit(target)
    head = RequestHead(
        method=method,
        target=target,
        path=unquote(split.path),
        query=_parse_query(split.query),
        headers=headers,
    )
    return head, end + 4


def _parse_query(query: str) -> list[tuple[str, str]]:
    # Exactly parse_qsl(keep_blank_values=True), one pair at a time, each decoded once: the
    # standard library's unquote is a Python loop per escape, and kuber-exec's supervised
    # prologue (the same few hundred escaped characters on every exec) took it ~150 us per
    # upgrade, which a real API server spends a microsecond on. The cache makes the server's
    # cost per exec independent of how long a repeated argument is.
    return [pair for part in query.split("&") for pair in _parse_pair(part)]


@functools.lru_cache(maxsize=4096)
def _parse_pair(part: str) -> tuple[tuple[str, str], ...]:
    return tuple(parse_qsl(part, keep_blank_values=True))


def http_response(
    status: int,
    body: bytes = b"",
    headers: Sequence[tuple[str, str]] = (),
    *,
    head_only: bool = False,
) -> bytes:
    """A whole HTTP/1.1 response with ``Content-Length`` (no body sent when ``head_only``)."""
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else body)


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (``b""`` gives the last chunk, which ends the body)."""
    return f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n"


def accept_token(key: str) -> str:
    """``Sec-WebSocket-Accept`` for the client's ``Sec-WebSocket-Key`` (RFC 6455 §4.2.2)."""
    return base64.b64encode(hashlib.sha1(key.encode("latin-1") + _WEBSOCKET_GUID).digest()).decode()


def _length_field(length: int) -> bytes:
    if length < 126:
        return bytes((length,))
    if length < 1 << 16:
        return b"\x7e" + struct.pack("!H", length)
    return b"\x7f" + struct.pack("!Q", length)


def frame(payload: bytes, opcode: int = OP_BINARY) -> bytes:
    """One unmasked, unfragmented server frame."""
    return bytes((0x80 | opcode,)) + _length_field(len(payload)) + payload


def close_frame(code: int = 1000, reason: bytes = b"") -> bytes:
    """A Close frame with ``code`` (and ``reason``)."""
    return frame(struct.pack("!H", code) + reason, OP_CLOSE)


def _unmask(payload: bytes, mask: bytes) -> bytes:
    if not payload:
        return payload
    count = len(payload)
    key = (mask * (count // 4 + 1))[:count]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(key, "little")).to_bytes(
        count, "little"
    )


def mask_frame(payload: bytes, opcode: int = OP_BINARY, mask: bytes = b"\x00\x00\x00\x00") -> bytes:
    """One masked client frame (for tests and the raw benchmark clients)."""
    length = _length_field(len(payload))
    return bytes((0x80 | opcode, length[0] | 0x80)) + length[1:] + mask + _unmask(payload, mask)


@attrs.frozen
class ClientFrame:
    """One client frame, unmasked. The server reads every frame as a whole message."""

    opcode: int
    payload: bytes


class FrameDecoder:
    """Splits the client's bytes into frames; feed with :meth:`feed`, drain with :meth:`frames`."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer += data

    def frames(self) -> list[ClientFrame]:
        """Every complete frame received so far.

        Raises:
            WireError: an unmasked frame, reserved bits, an unknown opcode, a fragmented or
                oversized control frame, or a payload over :data:`MAX_CLIENT_FRAME_BYTES`.
        """
        found: list[ClientFrame] = []
        buffer = self._buffer
        offset = 0
        while len(buffer) - offset >= 2:
            first, second = buffer[offset], buffer[offset + 1]
            opcode = first & 0x0F
            if first & 0x70:
                raise WireError("a client frame set reserved bits (no extension was agreed)")
            if opcode not in _DATA_OPCODES and opcode not in _CONTROL_OPCODES:
                raise WireError(f"a client frame had the unknown opcode {opcode}")
            if not second & 0x80:
                raise WireError("a client frame was not masked")
            length = second & 0x7F
            header = 2
            if length == 126:
                header = 4
                if len(buffer) - offset < header:
                    break
                (length,) = struct.unpack_from("!H", buffer, offset + 2)
            elif length == 127:
                header = 10
                if len(buffer) - offset < header:
                    break
                (length,) = struct.unpack_from("!Q", buffer, offset + 2)
            if opcode in _CONTROL_OPCODES and (length > 125 or not first & 0x80):
                raise WireError("a client control frame was fragmented or over 125 bytes")
            if length > MAX_CLIENT_FRAME_BYTES:
                raise WireError(f"a client frame exceeded {MAX_CLIENT_FRAME_BYTES} bytes")
            start = offset + header + 4
            if len(buffer) < start + length:
                break
            mask = bytes(buffer[start - 4 : start])
            found.append(ClientFrame(opcode, _unmask(bytes(buffer[start : start + length]), mask)))
            offset = start + length
        del buffer[:offset]
        return found
