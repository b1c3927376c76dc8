"""The local side of a forward's listeners (``kuber_exec_anyio._portforward._listener``), over
real loopback sockets on both runtimes: accepted connections are read only when asked, and
the accept loop outlives failures that concern one connection."""

from __future__ import annotations

import errno
import fcntl
import logging
import socket
import sys
import termios
from collections.abc import AsyncIterator

import anyio
import pytest

from kuber_exec_anyio._portforward._listener import LocalConnection, accept_connections

pytestmark = pytest.mark.anyio


class FlakyListener(socket.socket):
    """A listening socket whose next ``accept`` calls fail with ``failures`` first."""

    failures: list[OSError]

    def accept(self) -> tuple[socket.socket, object]:
        if self.failures:
            raise self.failures.pop(0)
        return super().accept()


def listening(failures: list[OSError] | None = None) -> FlakyListener:
    listener = FlakyListener(socket.AF_INET, socket.SOCK_STREAM)
    listener.failures = list(failures or [])
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


async def connected_pair() -> AsyncIterator[tuple[socket.socket, LocalConnection]]:
    """A blocking client socket and our stream of its accepted end."""
    with listening() as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        connection = LocalConnection(accepted)
        try:
            yield client, connection
        finally:
            client.close()
            await connection.aclose()


def unread(connection: LocalConnection) -> int:
    """The bytes waiting in the connection's socket (FIONREAD)."""
    sock: socket.socket = connection._socket
    answer = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int.from_bytes(answer, sys.byteorder)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[socket.socket, LocalConnection]]:
    async for both in connected_pair():
        yield both


async def test_bytes_go_both_ways_and_a_half_close_is_the_end_of_stream(
    pair: tuple[socket.socket, LocalConnection],
) -> None:
    client, connection = pair
    with anyio.fail_after(10):
        client.sendall(b"hello")
        assert await connection.receive() == b"hello"
        await connection.send(b"back" * 100_000)
        received = b""
        while len(received) < 400_000:
            received += client.recv(65536)
        assert received == b"back" * 100_000
        client.shutdown(socket.SHUT_WR)
        with pytest.raises(anyio.EndOfStream):
            await connection.receive()
        await connection.send_eof()
        assert client.recv(10) == b""


async def test_receive_reads_at_most_what_it_is_asked_for(
    pair: tuple[socket.socket, LocalConnection],
) -> None:
    client, connection = pair
    client.sendall(b"x" * 100_000)
    with anyio.fail_after(10):
        assert len(await connection.receive(10)) <= 10
        # The rest is still in the kernel's buffer: nothing was read ahead into memory.
        assert unread(connection) >= 100_000 - 10
        received = 10
        while received < 100_000:
            received += len(await connection.receive(100_000))
    assert received == 100_000


async def test_a_receive_of_nothing_is_refused_as_by_anyio(
    pair: tuple[socket.socket, LocalConnection],
) -> None:
    _client, connection = pair
    with pytest.raises(ValueError, match="max_bytes must be a positive integer"):
        await connection.receive(0)


async def test_closing_wakes_a_waiting_receiver_and_ends_further_use(
    pair: tuple[socket.socket, LocalConnection],
) -> None:
    _client, connection = pair
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            failed: list[BaseException] = []

            async def receive() -> None:
                try:
                    await connection.receive()
                except anyio.ClosedResourceError as error:
                    failed.append(error)

            tasks.start_soon(receive)
            await anyio.wait_all_tasks_blocked()
            await connection.aclose()
    assert len(failed) == 1
    with pytest.raises(anyio.ClosedResourceError):
        await connection.send(b"late")
    await connection.aclose()  # idempotent


async def test_a_reset_connection_is_broken(
    pair: tuple[socket.socket, LocalConnection],
) -> None:
    client, connection = pair
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client.close()  # RST

    async def send_until_it_breaks() -> None:
        while True:
            await connection.send(b"x" * 65536)

    with anyio.fail_after(10), pytest.raises(anyio.BrokenResourceError):
        await send_until_it_breaks()


async def test_the_accept_loop_passes_over_failures_of_one_connection_and_of_capacity(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = [OSError(errno.ECONNABORTED, "aborted"), OSError(errno.EMFILE, "Too many")]
    served: list[bytes] = []
    with listening(failures) as listener, anyio.fail_after(10):
        caplog.set_level(logging.WARNING, "kuber_exec.portforward")

        async def handler(connection: LocalConnection) -> None:
            async with connection:
                served.append(await connection.receive())
                tasks.cancel_scope.cancel()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(accept_connections, listener, handler, tasks)
            with socket.create_connection(listener.getsockname()) as client:
                client.sendall(b"through")
                await anyio.sleep_forever()
    assert served == [b"through"]
    assert "cannot accept a connection now: Too many" in caplog.text


async def test_any_other_accept_failure_propagates() -> None:
    with listening([OSError(errno.EINVAL, "Invalid argument")]) as listener:
        client = socket.create_connection(listener.getsockname())

        async def handler(connection: LocalConnection) -> None:
            raise AssertionError("no connection is accepted")

        with client, anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                with pytest.raises(OSError, match="Invalid argument") as caught:
                    await accept_connections(listener, handler, tasks)
    assert caught.value.errno == errno.EINVAL
