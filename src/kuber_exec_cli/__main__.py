"""``python -m kuber_exec_cli``: the ``kuber-exec`` command line, in a process of its own."""

from ._process import console_main

console_main()
