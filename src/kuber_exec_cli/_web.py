"""``kuber-exec web``: the browser terminal (kuber_exec_web), handed its own command line.

``kuber_exec_web`` (Starlette, uvicorn, and xterm.js from npm) is imported only when ``web`` is
used, so ``kuber-exec exec`` needs none of it.
"""

from __future__ import annotations

from kuber_exec_core import ExecError, ExecErrorCode

from ._local import EXIT_ERROR, LocalStreams, report

__all__ = ["run_web_command"]


def run_web_command(argv: list[str]) -> int:
    """``kuber-exec web ARGV``: the browser terminal's own command line, options and help."""
    try:
        from kuber_exec_web.demo import main as web_main
    except ImportError as error:
        report(
            LocalStreams.of_process(),
            ExecError(
                ExecErrorCode.FAILED,
                f"the browser terminal is not installed ({error}): pip install starlette uvicorn",
            ),
        )
        return EXIT_ERROR
    return web_main(argv)
