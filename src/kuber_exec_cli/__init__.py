"""The ``kuber-exec`` command line: ``kubectl exec`` with the workspace ownership checks.

It is a client of the public API (``kuber_exec_asyncio``: asyncio starts faster than trio, which
a command line pays for on every run), not part of it: install it with the ``cli`` extra. Entry
point: :func:`main`; the ``kuber-exec`` script and ``python -m kuber_exec_cli`` run it through
``_process`` (a process's own start and end, tuned for speed).

One job a module: ``_arguments`` (parsers, help texts, options), ``_exec`` (the exec command),
``_demo`` (the demo script), ``_cluster`` (the backend a command talks to), ``_sandbox`` (the
in-process sandbox), ``_streaming`` (a session to local stdin/stdout/stderr, with the caps),
``_stdin`` (local stdin, read in batches), ``_terminal`` (raw mode, window size),
``_supervision`` (running under asyncio: errors and signals to exit statuses), ``_main``
(dispatch), ``_process`` (the process's start and end), and one module a further command
(``_copy``, ``_port_forward``, ``_attach``, ...).
"""

import typing as _typing

from kuber_exec_core.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from ._main import main as main

__all__ = ["main"]

# Lazy, so that the script's entry (``_process``) runs before the command line's modules load:
# it turns the collector off for their loading.
if not _typing.TYPE_CHECKING:  # a type checker sees the import above, not a catch-all
    __getattr__, __dir__ = _lazy_exports(globals(), {"._main": ("main",)})
