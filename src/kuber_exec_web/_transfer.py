"""File transfer for the browser terminal: upload into the shell's working directory, download.

Routes (relative to the app): ``POST /files?terminal=ID&name=NAME`` streams its request body
into ``NAME`` in the working directory of the terminal's shell (``upload_stream``);
``GET /files?terminal=ID&path=PATH`` streams the file ``PATH`` (relative paths: from that
directory) to the browser (``download_stream``) with a ``Content-Disposition``. Instead of
``terminal``, ``deployment`` (and ``container``) with an absolute ``path`` name a target
directly. Every request goes through the app's ``authorize`` callable, and acts for the same
workspace and user as its terminal; refusals and copy errors are JSON objects
``{"code", "problem", "message"}`` with an HTTP status.

Finding the shell's working directory: every terminal's command is started as
``env KUBER_EXEC_TERMINAL=<random marker> COMMAND``; the shell, and whatever it starts, carry
the marker in their environment. A small exec in the same container finds the processes whose
``/proc/PID/environ`` holds it, keeps the one whose parent does not (the shell itself, not a
program it runs) and reads its ``/proc/PID/cwd``. It needs ``/proc`` and ``grep`` in the image
and the exec to run as the shell's user (as it does: same container, same user).
"""

from __future__ import annotations

import logging
import posixpath
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, MutableMapping
from urllib.parse import quote

import attrs
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from kuber_exec_anyio import (
    CopyError,
    CopyProblem,
    CopyTarget,
    ExecError,
    ExecErrorCode,
    ExecRequest,
    ExecService,
    download_stream,
    upload_stream,
)
from kuber_exec_core import Impersonation, Workspace

from ._authorize import (
    Authorize,
    TerminalGrant,
    TerminalRefused,
    TerminalRequest,
    bearer_from_authorization,
    call_authorize,
)

__all__ = ["DEFAULT_MAX_UPLOAD_BYTES", "MARKER_VARIABLE", "FileTransfer", "TerminalRegistry"]

logger = logging.getLogger("kuber_exec_web")

#: The environment variable that marks a terminal's shell (see the module docstring).
MARKER_VARIABLE = "KUBER_EXEC_TERMINAL"
#: The largest upload ``create_app`` accepts by default (1 GiB).
DEFAULT_MAX_UPLOAD_BYTES = 1 << 30
_MAX_NAME_BYTES = 255
# The marker is an argument, never spliced into the script; the probe's own environment lacks
# it, so only the terminal's processes match. Exit 3: no such process.
_CWD_SCRIPT = r"""
set -- $(grep -lsF "KUBER_EXEC_TERMINAL=$1" /proc/[0-9]*/environ 2>/dev/null)
for file; do
  dir=${file%/environ}
  parent=$(sed -n 's/^PPid:[[:space:]]*//p' "$dir/status" 2>/dev/null)
  case " $* " in *" /proc/$parent/environ "*) continue ;; esac
  readlink "$dir/cwd" && exit 0
done
exit 3
"""


@attrs.frozen
class Terminal:
    """One open terminal, as its file transfers need it."""

    workspace: Workspace
    on_behalf_of: Impersonation | None
    deployment: str
    pod: str
    container: str
    marker: str


class TerminalRegistry:
    """The terminals open in this app, by a random id the page is told in ``open``."""

    def __init__(self) -> None:
        self._terminals: dict[str, Terminal] = {}

    @staticmethod
    def new_marker() -> str:
        """A fresh marker for a terminal's environment."""
        return secrets.token_hex(16)

    @staticmethod
    def wrap(command: tuple[str, ...], marker: str) -> tuple[str, ...]:
        """``command`` started with the marker in its environment."""
        return ("env", f"{MARKER_VARIABLE}={marker}", *command)

    def add(self, terminal: Terminal) -> str:
        """Register ``terminal``; its id (unguessable, though it is not a credential)."""
        terminal_id = secrets.token_urlsafe(16)
        self._terminals[terminal_id] = terminal
        return terminal_id

    def remove(self, terminal_id: str) -> None:
        self._terminals.pop(terminal_id, None)

    def get(self, terminal_id: str) -> Terminal | None:
        return self._terminals.get(terminal_id)


class _Aborted(Exception):
    """A download failed after its headers went out: nothing more can be said."""


class _Refusal(Exception):
    def __init__(self, status: int, code: str, message: str, problem: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.problem = status, code, message, problem

    def response(self) -> Response:
        return JSONResponse(
            {"code": self.code, "problem": self.problem, "message": self.message},
            status_code=self.status,
            headers={"cache-control": "no-store"},
        )


_PROBLEM_STATUS = {
    CopyProblem.NO_SUCH_PATH: 404,
    CopyProblem.PERMISSION_DENIED: 403,
    CopyProblem.NOT_A_DIRECTORY: 409,
    CopyProblem.IS_A_DIRECTORY: 409,
    CopyProblem.UNSUPPORTED: 409,
    CopyProblem.NO_SPACE: 507,
    CopyProblem.SIZE_MISMATCH: 400,
}
_CODE_STATUS = {
    ExecErrorCode.INVALID: 400,
    ExecErrorCode.TARGET_NOT_FOUND: 404,
    ExecErrorCode.TARGET_FORBIDDEN: 403,
}


def _refusal_of(error: ExecError) -> _Refusal:
    if isinstance(error, CopyError):
        status = _PROBLEM_STATUS.get(error.problem, 502)
        return _Refusal(status, error.code.value, error.message, error.problem.value)
    return _Refusal(_CODE_STATUS.get(error.code, 502), error.code.value, error.message)


def _file_name(value: str | None) -> str:
    """An upload's name: one path component, no NUL, not ``.`` or ``..``."""
    if (
        not value
        or "/" in value
        or "\0" in value
        or value in (".", "..")
        or len(value.encode("utf-8", "surrogateescape")) > _MAX_NAME_BYTES
    ):
        raise _Refusal(400, ExecErrorCode.INVALID.value, "name must be a file name (no '/')")
    return value


def _disposition(path: str) -> str:
    name = posixpath.basename(path) or "download"
    ascii_name = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"


@attrs.frozen
class _Resolved:
    target: CopyTarget
    terminal: Terminal | None


class FileTransfer:
    """The ``/files`` route: see the module docstring."""

    def __init__(
        self,
        service: ExecService,
        authorize: Authorize,
        registry: TerminalRegistry,
        *,
        max_upload_bytes: int,
        origin_allowed: Callable[[Mapping[str, str]], bool],
    ) -> None:
        self.service = service
        self.authorize = authorize
        self.registry = registry
        self.max_upload_bytes = max_upload_bytes
        self.origin_allowed = origin_allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            if not self.origin_allowed(request.headers):
                raise _Refusal(403, "UNAUTHORIZED", "cross-origin request refused")
            resolved = await self._resolve(request)
            if request.method == "POST":
                response = await self._upload(request, resolved)
            else:
                await self._download(request, resolved, send)
                return
        except _Aborted:
            return  # The response is left unfinished: the server drops the connection.
        except ClientDisconnect:
            # The browser left mid-upload: the copy has failed (and is audited so); nobody to
            # answer.
            logger.info("file transfer: the browser left before the upload's end")
            return
        except _Refusal as refusal:
            response = refusal.response()
        except ExecError as error:
            response = _refusal_of(error).response()
        await response(scope, receive, send)

    async def _resolve(self, request: Request) -> _Resolved:
        query = dict(request.query_params)
        terminal_id = query.get("terminal")
        terminal = None if terminal_id is None else self.registry.get(terminal_id)
        if terminal_id is not None and terminal is None:
            raise _Refusal(404, "TERMINAL_NOT_FOUND", "no such terminal (it has ended)")
        deployment = terminal.deployment if terminal else query.get("deployment", "")
        container = terminal.container if terminal else query.get("container") or None
        if not deployment:
            raise _Refusal(400, ExecErrorCode.INVALID.value, "terminal or deployment is needed")
        asked = TerminalRequest(
            scope=request.scope,
            headers=dict(request.headers),
            query=query,
            deployment=deployment,
            container=container,
            bearer_token=bearer_from_authorization(request.headers.get("authorization", "")),
        )
        try:
            grant = await call_authorize(self.authorize, asked)
        except TerminalRefused as refused:
            logger.info("file transfer refused by the authorization callable: %s", refused.message)
            raise _Refusal(403, "UNAUTHORIZED", refused.message) from None
        if terminal is not None and grant != TerminalGrant(
            terminal.workspace, terminal.on_behalf_of
        ):
            # Another workspace or user than the terminal's own: as if it did not exist.
            raise _Refusal(404, "TERMINAL_NOT_FOUND", "no such terminal (it has ended)")
        target = CopyTarget(grant.workspace, deployment, container, grant.on_behalf_of)
        return _Resolved(target, terminal)

    async def _cwd(self, resolved: _Resolved) -> str:
        terminal = resolved.terminal
        assert terminal is not None
        result = await self.service.execute(
            ExecRequest(
                workspace=terminal.workspace,
                deployment=terminal.deployment,
                container=terminal.container,
                command=("sh", "-c", _CWD_SCRIPT, "sh", terminal.marker),
                on_behalf_of=terminal.on_behalf_of,
            ),
            stdout_cap=64 * 1024,
            stderr_cap=64 * 1024,
        )
        if result.target.pod != terminal.pod:
            # The Deployment resolves to another pod now (a rollout, a replica gone): the
            # shell is not there, and neither should its files go.
            raise _Refusal(
                409,
                "TERMINAL_MOVED",
                f"the Deployment now resolves to pod {result.target.pod}, not the terminal's "
                f"{terminal.pod}: reconnect the terminal",
            )
        cwd = result.stdout.decode("utf-8", "surrogateescape").rstrip("\n")
        if result.exit_code != 0 or not cwd.startswith("/"):
            raise _Refusal(
                409,
                "CWD_UNKNOWN",
                "the terminal's working directory could not be found (has its shell exited?)",
            )
        return cwd

    async def _path(self, request: Request, resolved: _Resolved, name: str) -> str:
        if resolved.terminal is None:
            if not name.startswith("/"):
                raise _Refusal(400, ExecErrorCode.INVALID.value, "path must be absolute here")
            return name
        # Even for an absolute path: the probe also checks the terminal's pod is still the one.
        return posixpath.join(await self._cwd(resolved), name)

    async def _upload(self, request: Request, resolved: _Resolved) -> Response:
        name = _file_name(request.query_params.get("name"))
        length = request.headers.get("content-length")
        if length is None or not length.isdigit():
            raise _Refusal(411, ExecErrorCode.INVALID.value, "an upload needs a Content-Length")
        size = int(length)
        if size > self.max_upload_bytes:
            raise _Refusal(
                413,
                ExecErrorCode.INVALID.value,
                f"the upload is {size} bytes, more than the limit of {self.max_upload_bytes}",
            )
        remote = await self._path(request, resolved, name)

        async def body() -> AsyncIterator[bytes]:
            async for piece in request.stream():
                if piece:
                    yield piece

        result = await upload_stream(self.service, resolved.target, body(), remote, size=size)
        logger.info("upload of %d bytes to %s", result.size, result.remote_path)
        return JSONResponse(
            {
                "path": result.remote_path,
                "size": result.size,
                "sha256": result.sha256,
                "sha256_verified": result.sha256_verified,
            },
            headers={"cache-control": "no-store"},
        )

    async def _download(self, request: Request, resolved: _Resolved, send: Send) -> None:
        path = request.query_params.get("path") or ""
        if not path:
            raise _Refusal(400, ExecErrorCode.INVALID.value, "path is needed")
        remote = await self._path(request, resolved, path)
        started: MutableMapping[str, bool] = {"headers": False}
        headers = [
            (b"content-type", b"application/octet-stream"),
            (b"content-disposition", _disposition(remote).encode("latin-1")),
            (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff"),
        ]

        async def start() -> None:
            if not started["headers"]:
                started["headers"] = True
                await send({"type": "http.response.start", "status": 200, "headers": headers})

        async def sink(data: bytes) -> None:
            # The first bytes send the headers: an error before them is still a JSON answer.
            await start()
            await send({"type": "http.response.body", "body": data, "more_body": True})

        try:
            await download_stream(self.service, resolved.target, remote, sink)
        except ExecError as error:
            if not started["headers"]:
                raise
            # Too late for a status: the body ends unterminated, so the browser sees a failure.
            logger.warning("download of %s failed after its first bytes: %s", remote, error)
            raise _Aborted from error
        await start()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
