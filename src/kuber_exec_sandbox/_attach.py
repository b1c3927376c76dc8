"""One attach session on an accepted WebSocket: a container's running process, its output from
now on, stdin and resize to it (docs/protocol.md section 12).

The wire is exec's (the same ``ServerChannel``): one empty message on the lowest writable
channel, output as whole messages, then, once the process ends, a ``Success`` Status (an attach
reports no exit code: the kubelet's attach returns when the streams end), Close 1000. Output
written before the client attached is not replayed (the log has it). A client that leaves (or
closes stdin) leaves the process running: attach never starts nor stops anything.
"""

from __future__ import annotations

import logging

import trio

from kuber_exec_core.channels import Channel, ExecProtocolError
from kuber_exec_core.server import (
    ResizeReceived,
    ServerChannel,
    StdinReceived,
    status_failure,
    status_success,
)

from ._exec_request import ExecPlan
from ._runtime import RunningContainer
from ._websocket import ClientGone, FrameTooLarge, WebSocket

__all__ = ["run_attach_session"]

_log = logging.getLogger("kuber_exec_sandbox")
_CLOSE_NORMAL = 1000
_CLOSE_PROTOCOL_ERROR = 1002
_CLOSE_TOO_BIG = 1009


async def run_attach_session(
    websocket: WebSocket, plan: ExecPlan, container: RunningContainer | None
) -> None:
    """Serve ``plan`` (an attach) on ``websocket`` until the process ends or the client leaves,
    then close the connection. Never raises for anything the client does."""
    channel = ServerChannel(plan.subprotocol)
    code, reason = _CLOSE_NORMAL, ""
    try:
        streams = plan.streams
        await websocket.send_message(
            channel.initial_message(stdout=streams.stdout, stderr=streams.stderr)
        )
        failure = plan.failure
        if failure is None and container is None:
            failure_text = f'container not found ("{plan.container}")'
            failure = status_failure(f"unable to upgrade connection: {failure_text}")
        if failure is not None:
            message = channel.status_message(failure)
            if message is not None:
                await websocket.send_message(message)
            return
        assert container is not None
        async with trio.open_nursery() as nursery:

            async def read_client() -> None:
                nonlocal code, reason
                try:
                    while True:
                        event = channel.decode_client(await websocket.receive_message())
                        match event:
                            case StdinReceived(data) if streams.stdin:
                                await container.write_stdin(data)
                            case ResizeReceived(width, height) if container.tty:
                                container.resize(width, height)
                            case _:
                                pass  # stdin close and unopened channels: the process runs on
                except ClientGone:
                    pass
                except FrameTooLarge as error:
                    code, reason = _CLOSE_TOO_BIG, str(error)
                except ExecProtocolError as error:
                    code, reason = _CLOSE_PROTOCOL_ERROR, error.message[:120]
                nursery.cancel_scope.cancel()

            nursery.start_soon(read_client)
            await _pump_output(websocket, channel, plan, container)
            message = channel.status_message(status_success())
            if message is not None:
                await websocket.send_message(message)
            nursery.cancel_scope.cancel()
    except ClientGone:
        _log.debug("attach client went away (the process runs on)")
    finally:
        await websocket.close(code, reason)


async def _pump_output(
    websocket: WebSocket, channel: ServerChannel, plan: ExecPlan, container: RunningContainer
) -> None:
    log = container.log
    seq = log.next_seq
    streams = plan.streams
    while True:
        await log.wait_after(seq)
        chunks = log.chunks(seq)
        for chunk in chunks:
            seq = chunk.seq + 1
            # With a TTY everything is the terminal's (stdout); else each stream as asked.
            target = Channel.STDOUT if container.tty else chunk.channel
            if streams.stdout if target is Channel.STDOUT else streams.stderr:
                await websocket.send_message(channel.output(target, chunk.data))
        if not chunks and log.ended:
            return
        if log.ended and seq >= log.next_seq:
            return
