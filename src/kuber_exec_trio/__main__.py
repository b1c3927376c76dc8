"""``python -m kuber_exec_trio``: the ``kuber-exec`` command line."""

from ._cli import main

raise SystemExit(main())
