"""``python -m kuber_exec_sandbox``: the sandbox's command line, as ``kuber-exec sandbox``."""

import sys

from ._command import main

sys.exit(main())
