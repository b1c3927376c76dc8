"""The ``kuber-exec`` process's own start and end (``kuber_exec_cli._process``).

The script skips the interpreter's teardown with ``os._exit`` and loads its modules with the
collector off. What a user could see of either must not change: output written before the end
arrives, ``atexit`` functions run, a thread the interpreter would wait for is waited for, a
failed flush is reported as before, and a long command collects its garbage as usual.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kuber_exec_cli._process import start_up_done

from .clirun import RUN_TIMEOUT_SECONDS, cli_env

#: Python's own exit status when flushing stdout fails at exit (Py_FinalizeEx).
FLUSH_FAILED_STATUS = 120


def buffered_env() -> dict[str, str]:
    """The CLI's environment with stdout block-buffered, as a user's is when it is a pipe."""
    env = cli_env()
    env.pop("PYTHONUNBUFFERED", None)
    return env


def python(script: str, stdout: int = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    """``script`` in a fresh interpreter; stderr captured, stdout too unless redirected."""
    return subprocess.run(
        [sys.executable, "-c", script],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=buffered_env(),
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )


def script_command(body: str) -> str:
    """A script that runs ``console_main`` (as the ``kuber-exec`` script does) with ``body`` as the
    command ``main()`` picked: a function ``command() -> int`` defined after ``import`` lines."""
    return (
        "import atexit, gc, sys, threading\n"
        "from kuber_exec_cli import _main, _process\n"
        f"{body}\n"
        "_main._choose = lambda args: command\n"
        "_process.console_main()\n"
    )


def test_the_end_runs_atexit_and_delivers_buffered_output() -> None:
    done = python(
        script_command(
            "def command():\n"
            "    atexit.register(lambda: print(' and atexit', end=''))\n"
            "    print('buffered', end='')\n"
            "    return 3\n"
        )
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, b"buffered and atexit", b"")


def test_the_end_waits_for_a_thread_the_interpreter_would_wait_for() -> None:
    # The thread finishes only after the command returned: it waits for a line the test writes
    # once the command said it is done. Ended at once, the process would never print it.
    script = script_command(
        "def finish():\n"
        "    sys.stdin.readline()\n"
        "    print('thread done', flush=True)\n"
        "def command():\n"
        "    threading.Thread(target=finish).start()\n"
        "    print('returning', flush=True)\n"
        "    return 4\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=buffered_env(),
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stdout.readline() == b"returning\n"
        process.stdin.write(b"go\n")
        process.stdin.close()
        rest = process.stdout.read()
        assert (process.wait(RUN_TIMEOUT_SECONDS), rest) == (4, b"thread done\n")


def test_the_end_skips_the_interpreter_s_teardown() -> None:
    # What the teardown would do: free a module's globals, calling their finalizers. The
    # command line skips it (its ~30 ms, docs/benchmarks.md); its own files are closed by then.
    done = python(
        script_command(
            "import os, types\n"
            "class Noisy:\n"
            "    def __del__(self, write=os.write):\n"
            "        write(1, b'torn down')\n"
            "def command():\n"
            "    name = 'made_by_the_command'\n"
            "    module = sys.modules[name] = types.ModuleType(name)\n"
            "    module.kept = Noisy()\n"
            "    return 0\n"
        )
    )
    assert (done.returncode, done.stdout) == (0, b"")


def test_a_failed_flush_at_the_end_is_reported_as_the_interpreter_always_did() -> None:
    # stdout is a pipe nobody reads, closed before the process starts: the final flush fails.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = python(
            script_command("def command():\n    print('lost')\n    return 0\n"),
            stdout=write_end,
        )
    finally:
        os.close(write_end)
    assert done.returncode == FLUSH_FAILED_STATUS
    assert b"BrokenPipeError" in done.stderr


def test_a_command_that_raises_ends_as_python_reports_it() -> None:
    done = python(script_command("def command():\n    raise LookupError('a bug')\n"))
    assert done.returncode == 1
    assert done.stderr.rstrip().endswith(b"LookupError: a bug")


def test_the_script_collects_garbage_as_usual_once_its_command_runs() -> None:
    # The command runs after start-up: the collector is back on, and what loading built is
    # frozen out of its scans.
    done = python(
        script_command(
            "def command():\n    print(gc.isenabled(), gc.get_freeze_count() > 0)\n    return 7\n"
        )
    )
    assert (done.returncode, done.stdout, done.stderr) == (7, b"True True\n", b"")


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("collector_off")
def test_main_in_somebody_else_s_process_leaves_their_collector_alone() -> None:
    # Only console_main pauses the collector; start_up_done must not turn on one that the
    # embedding program turned off.
    start_up_done()
    assert not gc.isenabled()
