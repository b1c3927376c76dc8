"""``python -m kuber_exec_cli``: the ``kuber-exec`` command line."""

from ._main import main

raise SystemExit(main())
