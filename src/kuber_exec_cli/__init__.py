"""The ``kuber-exec`` command line: ``kubectl exec`` with the workspace ownership checks.

It is a client of the public API (``kuber_exec_trio``), not part of it: install it with the
``cli`` extra. Entry point: :func:`main` (the ``kuber-exec`` script, ``python -m kuber_exec_cli``).
"""

from ._cli import main as main

__all__ = ["main"]
