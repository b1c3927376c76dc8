"""The ``kuber-exec`` process's own start and end, tuned for a program that lives a fraction of
a second.

Contract of :func:`console_main` (the ``kuber-exec`` script, ``python -m kuber_exec_cli``): it runs
:func:`~kuber_exec_cli._main.main` and ends the process with its status, never returning. What
it changes against a plain ``sys.exit(main())``, and why (docs/benchmarks.md, what start-up
costs):

- The cyclic garbage collector is off while the command's modules load, then what they built is
  frozen (:func:`gc.freeze`: never scanned again) and collection resumes as usual
  (:func:`start_up_done`) before the command runs, so that a long session collects its cycles
  as any program does. Loading creates tens of thousands of long-lived objects and no garbage
  worth collecting; the collections it would trigger cost about 10 ms a command.
- The end skips the interpreter's teardown (freeing every module and class, about 30 ms) with
  :func:`os._exit`, from the last ``atexit`` function: by then the interpreter has waited for
  the threads it waits for and run every other ``atexit`` function; what is left that anybody
  could see is flushing stdout and stderr, which it does. When a flush fails (a closed pipe), or
  :func:`~kuber_exec_cli._main.main` raised, the interpreter ends the ordinary way and reports it
  as it always did.

:func:`~kuber_exec_cli._main.main` called in a process of somebody else's (tests, a program
embedding the command line) changes nothing of the collector and never ends the process.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from typing import NoReturn

__all__ = ["console_main", "start_up_done"]

# Set only by console_main, in its own process: start_up_done must not turn on a collector that
# a program embedding the command line turned off.
_collector_paused = False
# The status main() returned; None while it runs, and after it raised.
_exit_status: int | None = None


def console_main() -> NoReturn:
    """Run the command line on ``sys.argv`` and end the process with its exit status."""
    global _collector_paused, _exit_status
    # Registered before anything else can register one: atexit functions run in reverse order,
    # so this one runs last.
    atexit.register(_end_without_teardown)
    gc.disable()
    _collector_paused = True
    from ._main import main

    _exit_status = main()
    raise SystemExit(_exit_status)


def start_up_done() -> None:
    """The command's modules are loaded: freeze what loading built, collect as usual from now.

    Does nothing unless :func:`console_main` paused the collector in this process.
    """
    global _collector_paused
    if _collector_paused:
        _collector_paused = False
        gc.freeze()
        gc.enable()


def _end_without_teardown() -> None:
    if _exit_status is None:
        return  # main() raised: the interpreter reports it and ends as usual.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # The interpreter's own flush fails again and reports it as it always did.
    os._exit(_exit_status)
