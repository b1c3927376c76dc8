"""kuber-exec's browser terminal: an ASGI app bridging xterm.js to ``open_interactive(tty=True)``.

``create_app(service, authorize)`` returns a Starlette application with the page and its
WebSocket; mount it in a Starlette or FastAPI app, or serve it with any ASGI server (uvicorn on
asyncio; hypercorn on asyncio or trio). Authorization is the platform's: ``authorize`` maps each
:class:`TerminalRequest` to a ``Workspace`` (or a :class:`TerminalGrant` that also names the user
the exec acts for) or refuses it. ``kuber-exec web --sandbox`` serves
the sandbox's demo workspace (:mod:`kuber_exec_web.demo`). See docs/web.md.
"""

from ._app import AssetsMissingError as AssetsMissingError
from ._app import create_app as create_app
from ._app import default_assets_dir as default_assets_dir
from ._authorize import Authorize as Authorize
from ._authorize import TerminalGrant as TerminalGrant
from ._authorize import TerminalRefused as TerminalRefused
from ._authorize import TerminalRequest as TerminalRequest
from ._authorize import token_authorizer as token_authorizer
from ._bridge import PROTOCOL as PROTOCOL

__all__ = [
    "PROTOCOL",
    "AssetsMissingError",
    "Authorize",
    "TerminalGrant",
    "TerminalRefused",
    "TerminalRequest",
    "create_app",
    "default_assets_dir",
    "token_authorizer",
]
