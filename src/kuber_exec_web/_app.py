"""``create_app``: the browser terminal as a Starlette (ASGI) application.

Routes, relative to wherever the app is mounted: ``/`` the page, ``/ws`` the WebSocket
(:mod:`kuber_exec_web._bridge`), ``/static/`` the page's own script and style, ``/assets/xterm/``
and ``/assets/addon-fit/`` xterm.js and its fit addon, served from the ``node_modules`` that
``npm ci`` made next to this package's ``package.json`` (never from a CDN). With
``recordings``, also the replay (:mod:`kuber_exec_web._replay`) and asciinema-player; with
``file_transfer`` (the default), ``/files`` (:mod:`kuber_exec_web._transfer`).
"""

from __future__ import annotations

import html
import os
from collections.abc import Collection, Sequence
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from kuber_exec_anyio import ExecError, ExecErrorCode, ExecService, SessionHost
from kuber_exec_core.sharing import DEFAULT_RING_BYTES

from ._authorize import Authorize
from ._bridge import PROTOCOL, TerminalEndpoint
from ._recordings import RecordingStore
from ._replay import replay_routes
from ._transfer import DEFAULT_MAX_UPLOAD_BYTES, FileTransfer, TerminalRegistry

__all__ = ["AssetsMissingError", "create_app", "default_assets_dir"]

_HERE = Path(__file__).resolve().parent
_STATIC = _HERE / "static"
#: The environment variable that points at another ``node_modules`` (e.g. a packaged install).
ASSETS_ENV = "KUBER_EXEC_WEB_ASSETS"
_XTERM = ("@xterm", "xterm")
_FIT = ("@xterm", "addon-fit")
_PLAYER = ("asciinema-player", "dist", "bundle")

_SECURITY_HEADERS = {
    # Scripts and sockets from this origin only; xterm.js adds inline styles.
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; base-uri 'self'; form-action 'self'"
    ),
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}


class AssetsMissingError(ExecError):
    """xterm.js is not installed where the app looks for it."""

    def __init__(self, where: Path, what: str = "xterm.js") -> None:
        super().__init__(
            ExecErrorCode.FAILED,
            f"{what} is not installed in {where}: run `npm ci` in {_HERE} (or point "
            f"{ASSETS_ENV} at a node_modules holding @xterm/xterm, @xterm/addon-fit and "
            "asciinema-player)",
        )


def default_assets_dir() -> Path:
    """Where the app finds ``node_modules``: ``$KUBER_EXEC_WEB_ASSETS``, else next to it."""
    configured = os.environ.get(ASSETS_ENV)
    return Path(configured) if configured else _HERE / "node_modules"


def _page(
    title: str,
    base: str,
    deployment: str,
    ping_interval: float,
    *,
    replay: bool = False,
    transfer: bool = False,
) -> str:
    attribute = html.escape
    replay_link = '\n  <a id="replay" href="replay">Recordings</a>' if replay else ""
    # Drop a file on the terminal to upload it; type a path here to download it.
    transfer_form = (
        '\n  <form id="download" method="get" action="files">'
        '<label>Download <input id="download-path" name="path" placeholder="path (from the '
        'shell\'s directory)" autocomplete="off" spellcheck="false" size="28"></label>'
        '<button type="submit">Get</button></form>'
        '\n  <span id="transfer" role="status"></span>'
        if transfer
        else ""
    )
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{attribute(title)}</title>
<base href="{attribute(base)}">
<link rel="stylesheet" href="assets/xterm/css/xterm.css">
<link rel="stylesheet" href="static/terminal.css">
</head>
<body data-protocol="{attribute(PROTOCOL)}" data-deployment="{attribute(deployment)}"
      data-ping-interval="{ping_interval:g}">
<header>
  <form id="target" method="get" action="">
    <label>Deployment <input id="deployment" name="deployment" value="{attribute(deployment)}"
      autocomplete="off" spellcheck="false" size="24"></label>
    <button type="submit">Connect</button>
  </form>
  <span id="status" role="status">connecting&hellip;</span>{replay_link}{transfer_form}
  <span id="viewers" role="status"></span>
  <span id="owner" hidden><button type="button" data-share="peer">Share (peer)</button>
    <button type="button" data-share="observer">Share (observer)</button>
    <button type="button" id="end-session">End session</button>
    <input id="share-link" readonly hidden size="40" aria-label="share link"></span>
</header>
<main id="terminal"></main>
<script src="assets/xterm/lib/xterm.js"></script>
<script src="assets/addon-fit/lib/addon-fit.js"></script>
<script src="static/terminal.js"></script>
</body>
</html>
"""


def create_app(
    service: ExecService,
    authorize: Authorize,
    *,
    command: Sequence[str] = ("sh",),
    default_deployment: str | None = None,
    title: str = "kuber-exec terminal",
    ping_interval: float = 25.0,
    flow_window: int = 512 * 1024,
    allowed_origins: Collection[str] | None = None,
    assets_dir: str | os.PathLike[str] | None = None,
    recordings: str | os.PathLike[str] | None = None,
    file_transfer: bool = True,
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    reconnect_grace: float = 60.0,
    ring_bytes: int = DEFAULT_RING_BYTES,
    join_secret: bytes | None = None,
    share_ttl: float = 3600.0,
    replica_address: str | None = None,
) -> Starlette:
    """The browser terminal: a page and a WebSocket that opens ``command`` with a TTY.

    Args:
        service: the ``ExecService`` the sessions run on (its limits and audit hook apply).
        authorize: maps each :class:`TerminalRequest` to the caller's ``Workspace``, or refuses
            it (return ``None`` or raise :class:`TerminalRefused`); sync or async.
        command: the argv every terminal runs (default ``sh``).
        default_deployment: the Deployment when the page's URL has no ``?deployment=``.
        title: the page's title.
        ping_interval: seconds between the app's pings and the page's (at most 30).
        flow_window: output bytes the app lets the page fall behind before it stops sending.
        allowed_origins: the ``Origin`` values a WebSocket may come from; ``None`` allows only
            the page's own origin (the ``Host`` it was served from).
        assets_dir: the ``node_modules`` holding ``@xterm/xterm`` and ``@xterm/addon-fit``
            (and ``asciinema-player`` for ``recordings``; default: :func:`default_assets_dir`).
        recordings: a directory (created if missing): every terminal is recorded there as
            asciicast v2 (output and resizes, not keystrokes; see docs/recording.md), and
            ``/replay`` lists and plays the caller's own recordings, behind ``authorize``.
        file_transfer: serve ``/files`` (:mod:`kuber_exec_web._transfer`): a file dropped on
            the terminal is uploaded into its shell's working directory, and a path can be
            downloaded; each terminal's command then starts as ``env KUBER_EXEC_TERMINAL=...
            COMMAND`` so that its shell can be found (see docs/web.md).
        max_upload_bytes: the largest upload ``/files`` accepts (HTTP 413 above it).
        reconnect_grace: seconds a terminal waits for a viewer after its last page left
            (dropped or closed) before it ends and its shell is cleaned up (default 60).
        ring_bytes: output kept per terminal for pages that dropped (default 4 MiB): a page
            that comes back within it resumes where it was, byte for byte.
        join_secret: the key (at least 32 bytes) share links' join tokens are signed with;
            the same on every replica. ``None``: a random one (links work on this process).
        share_ttl: seconds a share link stays valid (default one hour).
        replica_address: with several replicas behind a load balancer, this one's
            ``host:port`` as the others reach it: a page reconnecting to another replica is
            relayed to this one (its terminal's id names it, signed with ``join_secret``,
            which must then be the same on every replica).

    Raises:
        ExecError: ``EXEC_INVALID`` when ``ping_interval`` is not a number in (0, 30] or
            ``flow_window`` or ``max_upload_bytes`` not a positive integer (as every
            constructor refuses a bad value).
        AssetsMissingError: xterm.js is not installed there.
    """
    if (
        isinstance(ping_interval, bool)
        or not isinstance(ping_interval, int | float)
        or not 0 < ping_interval <= 30
    ):
        raise ExecError(
            ExecErrorCode.INVALID, "ping_interval must be more than 0 and at most 30 seconds"
        )
    if isinstance(flow_window, bool) or not isinstance(flow_window, int) or flow_window <= 0:
        raise ExecError(ExecErrorCode.INVALID, "flow_window must be a positive integer")
    if (
        isinstance(max_upload_bytes, bool)
        or not isinstance(max_upload_bytes, int)
        or max_upload_bytes <= 0
    ):
        raise ExecError(ExecErrorCode.INVALID, "max_upload_bytes must be a positive integer")
    modules = Path(assets_dir) if assets_dir is not None else default_assets_dir()
    xterm, fit = modules.joinpath(*_XTERM), modules.joinpath(*_FIT)
    if not (xterm / "lib" / "xterm.js").is_file() or not (fit / "lib" / "addon-fit.js").is_file():
        raise AssetsMissingError(modules)
    player = modules.joinpath(*_PLAYER)
    if recordings is not None and not (player / "asciinema-player.min.js").is_file():
        raise AssetsMissingError(modules, "asciinema-player")
    store = None if recordings is None else RecordingStore(recordings)
    registry = TerminalRegistry() if file_transfer else None
    endpoint = TerminalEndpoint(
        service,
        authorize,
        command=command,
        default_deployment=default_deployment,
        ping_interval=ping_interval,
        flow_window=flow_window,
        allowed_origins=None if allowed_origins is None else frozenset(allowed_origins),
        recordings=store,
        registry=registry,
        host=SessionHost(
            service,
            ring_bytes=ring_bytes,
            grace=reconnect_grace,
            secret=join_secret,
            replica=replica_address,
        ),
        share_ttl=share_ttl,
    )

    async def page(request: Request) -> Response:
        base = request.scope.get("root_path", "").rstrip("/") + "/"
        deployment = request.query_params.get("deployment") or default_deployment or ""
        return HTMLResponse(
            _page(
                title,
                base,
                deployment,
                ping_interval,
                replay=store is not None,
                transfer=registry is not None,
            ),
            headers=_SECURITY_HEADERS,
        )

    async def terminal(websocket: WebSocket) -> None:
        await endpoint(websocket)

    async def no_icon(request: Request) -> Response:
        return Response(status_code=204)

    replay = [] if store is None else replay_routes(store, authorize, player, title)
    files = []
    if registry is not None:
        transfer = FileTransfer(
            service,
            authorize,
            registry,
            max_upload_bytes=max_upload_bytes,
            origin_allowed=endpoint.origin_allowed,
        )
        files.append(Route("/files", transfer, methods=["GET", "POST"]))
    return Starlette(
        routes=[
            *replay,
            *files,
            Route("/", page, methods=["GET", "HEAD"]),
            Route("/favicon.ico", no_icon, methods=["GET", "HEAD"]),
            WebSocketRoute("/ws", terminal),
            Mount("/static", StaticFiles(directory=_STATIC), name="static"),
            Mount("/assets/xterm", StaticFiles(directory=xterm), name="xterm"),
            Mount("/assets/addon-fit", StaticFiles(directory=fit), name="addon-fit"),
        ]
    )
