"""The replay: a page that lists a workspace's recordings and plays one with asciinema-player.

Routes (with ``create_app(..., recordings=...)``): ``/replay`` the page (``?id=`` plays that
recording), ``/api/recordings`` the caller's recordings as JSON, ``/api/recordings/{id}`` one
recording's asciicast v2 file. Both API routes go through the same authorization callable as
the terminal: the page sends the token it was opened with (``#token=``) as
``Authorization: Bearer``, the callable gets a :class:`TerminalRequest` (its ``deployment``
the recording's, or ``?deployment=`` for the list) and answers a workspace; a workspace sees
its own recordings only, and anything else is a 404 (another workspace's recording does not
exist, as far as it can tell). asciinema-player comes from npm (``node_modules``), never a CDN.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from kuber_exec_anyio import Workspace

from ._authorize import Authorize, TerminalRefused, TerminalRequest, call_authorize
from ._recordings import RecordingStore, owned_by

__all__ = ["REPLAY_SECURITY_HEADERS", "replay_routes"]

logger = logging.getLogger("kuber_exec_web")

#: The replay page's headers: asciinema-player runs its terminal emulator as WebAssembly,
#: which a Content-Security-Policy allows only with 'wasm-unsafe-eval' (not 'unsafe-eval').
REPLAY_SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'self'; form-action 'self'"
    ),
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}


def _page(title: str, base: str) -> str:
    attribute = html.escape
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{attribute(title)} replay</title>
<base href="{attribute(base)}">
<link rel="stylesheet" href="assets/asciinema-player/asciinema-player.css">
<link rel="stylesheet" href="static/replay.css">
</head>
<body>
<header>
  <strong>Recordings</strong>
  <span id="status" role="status">loading&hellip;</span>
</header>
<div id="layout">
  <nav><ul id="recordings"></ul></nav>
  <main id="player"></main>
</div>
<script src="assets/asciinema-player/asciinema-player.min.js"></script>
<script src="static/replay.js"></script>
</body>
</html>
"""


def _bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return (value.strip() or None) if scheme.lower() == "bearer" else None


async def _authorized(
    authorize: Authorize, request: Request, deployment: str
) -> Workspace | Response:
    headers = dict(request.headers)
    terminal_request = TerminalRequest(
        scope=request.scope,
        headers=headers,
        query=dict(request.query_params),
        deployment=deployment,
        container=None,
        bearer_token=_bearer(headers),
    )
    try:
        # A replay acts for nobody: only the workspace the caller may see counts.
        return (await call_authorize(authorize, terminal_request)).workspace
    except TerminalRefused as refused:
        logger.info("replay refused by the authorization callable: %s", refused.message)
        return JSONResponse(
            {"code": "UNAUTHORIZED", "message": refused.message},
            status_code=403,
            headers=REPLAY_SECURITY_HEADERS,
        )


def _not_found() -> Response:
    return JSONResponse(
        {"code": "NOT_FOUND", "message": "no such recording"},
        status_code=404,
        headers=REPLAY_SECURITY_HEADERS,
    )


def replay_routes(
    store: RecordingStore, authorize: Authorize, player: Path, title: str
) -> list[BaseRoute]:
    """The replay's routes over ``store``; ``player`` is asciinema-player's ``dist/bundle``."""

    async def page(request: Request) -> Response:
        base = request.scope.get("root_path", "").rstrip("/") + "/"
        return HTMLResponse(_page(title, base), headers=REPLAY_SECURITY_HEADERS)

    async def listing(request: Request) -> Response:
        answer = await _authorized(authorize, request, request.query_params.get("deployment", ""))
        if isinstance(answer, Response):
            return answer
        return JSONResponse({"recordings": store.listing(answer)}, headers=REPLAY_SECURITY_HEADERS)

    async def recording(request: Request) -> Response:
        recording_id = str(request.path_params["id"])
        metadata = store.metadata(recording_id)
        if metadata is None:
            return _not_found()
        answer = await _authorized(authorize, request, str(metadata.get("deployment", "")))
        if isinstance(answer, Response):
            return answer
        path = store.cast_path(recording_id)
        if not owned_by(metadata, answer) or not path.is_file():
            return _not_found()
        return FileResponse(
            path,
            media_type="application/x-asciicast",
            headers=REPLAY_SECURITY_HEADERS,
        )

    return [
        Route("/replay", page, methods=["GET", "HEAD"]),
        Route("/api/recordings", listing, methods=["GET"]),
        Route("/api/recordings/{id}", recording, methods=["GET"]),
        Mount("/assets/asciinema-player", StaticFiles(directory=player), name="asciinema-player"),
    ]
