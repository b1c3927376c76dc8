"""Serve a command's output over HTTP from an asyncio app, streamed as it arrives.

    python examples/asyncio_http_exec.py --kubeconfig PATH --project demo --workspace-uid demo-uid

then ``curl 'http://127.0.0.1:8080/exec?deployment=web&command=sh&command=-c&command=date'``.

A deliberately small app on asyncio's own streams and h11 (no web framework needed): one
``KubernetesBackend`` for the whole app, one interactive session (no TTY) per request, stdout
relayed chunk by chunk with HTTP chunked encoding, the exit status as the last line. Errors map to
HTTP statuses by their ``ExecErrorCode``. The same shape works inside FastAPI, aiohttp or
Starlette: only the response object differs.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

import h11

from kuber_exec_asyncio import (
    ClusterConfig,
    Error,
    ExecError,
    ExecErrorCode,
    ExecRequest,
    ExecService,
    Exit,
    KubernetesBackend,
    Stderr,
    Stdout,
    Workspace,
)

HTTP_STATUS = {
    ExecErrorCode.INVALID: 400,
    ExecErrorCode.TARGET_NOT_FOUND: 404,
    ExecErrorCode.TARGET_FORBIDDEN: 403,
    ExecErrorCode.TARGET_NOT_READY: 409,
    ExecErrorCode.OUTPUT_LIMIT: 413,
    ExecErrorCode.ABORTED: 499,
    ExecErrorCode.FAILED: 502,
}


class ExecApp:
    """The app: ``GET /exec?deployment=D&command=ARG&command=ARG...`` for one workspace."""

    def __init__(self, service: ExecService, workspace: Workspace) -> None:
        self.service = service
        self.workspace = workspace

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            request = await _read_request(connection, reader)
            if request is not None:
                await self._respond(connection, writer.write, writer.drain, request)
        finally:
            writer.close()
            await writer.wait_closed()

    async def _respond(
        self,
        connection: h11.Connection,
        write: Callable[[bytes], None],
        drain: Callable[[], Awaitable[None]],
        request: h11.Request,
    ) -> None:
        parts = urlsplit(request.target.decode("ascii", "replace"))
        query = parse_qs(parts.query)
        if parts.path != "/exec" or "deployment" not in query:
            write(_simple(connection, 404, b"GET /exec?deployment=NAME&command=ARG...\n"))
            return
        exec_request = ExecRequest(
            workspace=self.workspace,
            deployment=query["deployment"][0],
            command=query.get("command", []),
        )
        try:
            async with self.service.open_interactive(exec_request, tty=False) as session:
                headers = [(b"content-type", b"text/plain; charset=utf-8")]
                write(connection.send(h11.Response(status_code=200, headers=headers)) or b"")
                async for frame in session:
                    match frame:
                        case Stdout(data=data) | Stderr(data=data):
                            write(connection.send(h11.Data(data=data)) or b"")
                            await drain()  # a slow HTTP client slows the exec (backpressure)
                        case Exit(exit_code=code):
                            line = f"\n[exit status {code}]\n".encode()
                            write(connection.send(h11.Data(data=line)) or b"")
                        case Error(code=code, message=message):
                            line = f"\n[{code.value}: {message}]\n".encode()
                            write(connection.send(h11.Data(data=line)) or b"")
                write(connection.send(h11.EndOfMessage()) or b"")
        except ExecError as error:
            body = f"{error.code.value}: {error.message}\n".encode()
            write(_simple(connection, HTTP_STATUS[error.code], body))
        await drain()


async def _read_request(
    connection: h11.Connection, reader: asyncio.StreamReader
) -> h11.Request | None:
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await reader.read(65536))
            continue
        return event if isinstance(event, h11.Request) else None


def _simple(connection: h11.Connection, status: int, body: bytes) -> bytes:
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    head = connection.send(h11.Response(status_code=status, headers=headers)) or b""
    return (
        head
        + (connection.send(h11.Data(data=body)) or b"")
        + (connection.send(h11.EndOfMessage()) or b"")
    )


async def serve(
    config: ClusterConfig,
    workspace: Workspace,
    host: str,
    port: int,
    on_listening: Callable[[int], None] = lambda port: None,
) -> None:
    """Serve until cancelled; ``on_listening`` receives the bound port."""
    async with KubernetesBackend(config) as backend:
        app = ExecApp(ExecService(backend), workspace)
        server = await asyncio.start_server(app.handle, host, port)
        async with server:
            on_listening(server.sockets[0].getsockname()[1])
            await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    parser.add_argument("--project", required=True)
    parser.add_argument("--workspace-uid", required=True)
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    config = ClusterConfig.from_kubeconfig(args.kubeconfig, args.context)
    workspace = Workspace(project=args.project, uid=args.workspace_uid)
    asyncio.run(serve(config, workspace, "127.0.0.1", args.port, lambda port: print(port)))


if __name__ == "__main__":
    main()
