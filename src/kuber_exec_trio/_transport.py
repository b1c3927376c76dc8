"""The exec WebSocket on trio: a ``WebSocketTransport`` over trio-websocket.

``open_trio_transport`` opens the upgrade on its own TCP/TLS stream, reports a refused upgrade
with the seed's errors, and hands the shared connection code (``kuber_exec_anyio.transport``)
whole messages, pings and closes. Only trio-websocket's idioms live here.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import h11
import trio
import trio_websocket

from kuber_exec_anyio.transport import (
    CLOSE_MESSAGE_TOO_BIG,
    MAX_SERVER_MESSAGE_BYTES,
    TransportClosed,
    TransportOptions,
    describe_error,
    message_too_big,
    single_exception,
)
from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.channels import Message
from kuber_exec_core.kube import exec_upgrade_error

__all__ = ["TrioWebSocketTransport", "open_trio_transport"]

# trio-websocket's default 4 KiB socket reads cost a syscall per 4 KiB of output.
_RECEIVE_BUFFER_BYTES = 256 * 1024
# Enough for any refusal's Status body; only the upgrade response is kept.
_MAX_REFUSAL_BYTES = 64 * 1024
_ABNORMAL_CLOSURE = 1006

_Stream = trio.SocketStream | trio.SSLStream[trio.SocketStream]


class TrioWebSocketTransport:
    """A trio-websocket connection as a :class:`~kuber_exec_anyio.transport.WebSocketTransport`."""

    def __init__(
        self,
        websocket: trio_websocket.WebSocketConnection,
        stream: _Stream,
        max_message_bytes: int = MAX_SERVER_MESSAGE_BYTES,
    ) -> None:
        self._websocket = websocket
        self._stream = stream
        self._max_message_bytes = max_message_bytes

    @property
    def subprotocol(self) -> str | None:
        return self._websocket.subprotocol

    @property
    def closing_handshake_done(self) -> bool:
        """Whether the server's Close frame arrived and trio-websocket has sent its reply (it
        sets its handshake event only after the reply went out), so the shared close has
        nothing to wait for (``kuber_exec_anyio._connection``). trio-websocket has no public
        flag for it: a version without this event reads as "not done" (the full close)."""
        handshake = getattr(self._websocket, "_close_handshake", None)
        return isinstance(handshake, trio.Event) and handshake.is_set()

    async def send(self, message: Message) -> None:
        try:
            await self._websocket.send_message(message)
        except trio_websocket.ConnectionClosed:
            raise TransportClosed(clean=False) from None

    async def receive(self) -> Message:
        try:
            message: Message = await self._websocket.get_message()
        except trio_websocket.ConnectionClosed as closed:
            code = closed.reason.code if closed.reason is not None else _ABNORMAL_CLOSURE
            reason = (
                message_too_big(self._max_message_bytes) if code == CLOSE_MESSAGE_TOO_BIG else None
            )
            raise TransportClosed(clean=code != _ABNORMAL_CLOSURE, reason=reason) from None
        return message

    async def ping(self) -> None:
        try:
            await self._websocket.ping()
        except trio_websocket.ConnectionClosed:
            raise TransportClosed(clean=False) from None

    async def aclose(self) -> None:
        await self._websocket.aclose()

    def abort(self) -> None:
        # Closing the socket is synchronous in trio; the stream's aclose only adds a checkpoint.
        # For TLS, dropping the transport without close_notify is the point of an abort.
        transport = (
            self._stream.transport_stream
            if isinstance(self._stream, trio.SSLStream)
            else self._stream
        )
        transport.socket.close()


@asynccontextmanager
async def open_trio_transport(options: TransportOptions) -> AsyncIterator[TrioWebSocketTransport]:
    """Open the exec WebSocket described by ``options`` on trio.

    Raises (on entry):
        ExecError: ``EXEC_FAILED`` when the server cannot be reached or the handshake fails;
            the seed's mapping of a refused upgrade (``exec_upgrade_error``) otherwise.
    """
    parts = urlsplit(options.url)
    secure = parts.scheme in ("https", "wss")
    resource = parts.path + (f"?{parts.query}" if parts.query else "")
    encoded = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in options.headers]
    # The TCP/TLS stream is ours, not trio-websocket's: after a server-initiated close
    # trio-websocket's client never closes its stream, and an unclosed socket leaks.
    stream = await _connect(
        parts.hostname or "", parts.port, secure, options.ssl_context, options.connect_timeout
    )
    opened = False
    try:
        with single_exception():
            async with trio.open_nursery() as nursery:
                upgrade = _UpgradeStream(stream)
                with trio.fail_after(options.connect_timeout):
                    websocket = await trio_websocket.wrap_client_stream(
                        nursery,
                        # It only uses the Stream interface (its endpoints fall back to repr).
                        upgrade,  # type: ignore[arg-type]
                        parts.netloc,
                        resource,
                        subprotocols=list(options.subprotocols),
                        extra_headers=encoded,
                        message_queue_size=1,
                        max_message_size=options.max_message_bytes,
                        receive_buffer_size=_RECEIVE_BUFFER_BYTES,
                    )
                upgrade.upgraded = True
                opened = True
                try:
                    yield TrioWebSocketTransport(websocket, stream, options.max_message_bytes)
                finally:
                    # trio-websocket's reader task lives in this nursery; the shared code has
                    # already closed (or given up on closing) the WebSocket.
                    nursery.cancel_scope.cancel()
    except trio_websocket.ConnectionRejected as rejected:
        # trio-websocket's reader task raises the rejection into our nursery.
        if opened:
            raise
        raise exec_upgrade_error(
            rejected.status_code, rejected.body or b"", options.subprotocols
        ) from None
    except (trio_websocket.HandshakeError, trio.TooSlowError, OSError) as error:
        if opened:
            raise
        raise ExecError(
            ExecErrorCode.FAILED, f"The exec upgrade failed: {describe_error(error)}"
        ) from None
    finally:
        await trio.aclose_forcefully(stream)


class _UpgradeStream(trio.abc.Stream):
    """The exec stream as trio-websocket sees it, keeping the server's answer to the upgrade.

    trio-websocket never reports a refusal whose body ends where the connection ends (no
    ``Content-Length``): the handshake waits until the connect timeout. A runtime's streaming
    server (the kubelet's code) refuses an unsupported subprotocol with exactly
    ``HTTP/1.1 403 Forbidden``, an empty header block, and a close. So at end of stream before
    the upgrade, this stream raises the refusal as ``ConnectionRejected`` in trio-websocket's
    reader task, which is how trio-websocket itself reports one (into our nursery).
    """

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream
        self._response = bytearray()
        self.upgraded = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self._stream.receive_some(max_bytes)
        if not self.upgraded:
            if data:
                self._response += data[: _MAX_REFUSAL_BYTES - len(self._response)]
            elif (refusal := _refusal(bytes(self._response))) is not None:
                raise refusal
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._stream.aclose()


def _refusal(response: bytes) -> trio_websocket.ConnectionRejected | None:
    """The non-101 HTTP response in ``response`` (all the server sent, then it closed)."""
    parser = h11.Connection(h11.CLIENT)
    parser.send(h11.Request(method="GET", target="/", headers=[("Host", "exec")]))
    parser.receive_data(response)
    parser.receive_data(b"")
    head: h11.Response | None = None
    body = bytearray()
    try:
        while isinstance(event := parser.next_event(), h11.Response | h11.Data):
            if isinstance(event, h11.Response):
                head = event
            else:
                body += event.data
    except h11.RemoteProtocolError:
        return None
    if head is None:
        return None
    return trio_websocket.ConnectionRejected(head.status_code, tuple(head.headers), bytes(body))


async def _connect(
    host: str, port: int | None, secure: bool, context: ssl.SSLContext | None, deadline: float
) -> _Stream:
    try:
        with trio.fail_after(deadline):
            tcp = await trio.open_tcp_stream(host, port or (443 if secure else 80))
            if not secure:
                return tcp
            tls = trio.SSLStream(
                tcp,
                context or ssl.create_default_context(),
                server_hostname=host,
                https_compatible=True,
            )
            try:
                await tls.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(tls)
                raise
            return tls
    except (OSError, trio.TooSlowError, trio.BrokenResourceError) as error:
        raise ExecError(
            ExecErrorCode.FAILED,
            f"Could not connect to {host}:{port}: {describe_error(error)}",
        ) from None
