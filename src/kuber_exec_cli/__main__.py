"""``python -m kuber_exec_cli``: the ``kuber-exec`` command line."""

from ._cli import main

raise SystemExit(main())
