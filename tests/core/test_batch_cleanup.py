"""The batch cleanup (issue 39): one exec for the sessions of a container that end together.

The argv builder and the parser are pure (hypothesis below); the script is run for real with
this machine's ``/bin/sh`` and, when installed, busybox's ``sh``, ``grep``, ``sed``, ``sort`` and
``tr`` (a directory of applet links on ``PATH``), against processes spawned here that carry the
session variable or the prologue's ``$0``, as a pod's would.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import ExecStreams, ResolvedTarget
from kuber_exec_core._exec_url import quote_value
from kuber_exec_core.kube import exec_path
from kuber_exec_core.supervision import (
    CLEANUP_MARKER,
    MAX_SESSIONS_PER_CLEANUP,
    SESSION_ENVIRONMENT_VARIABLE,
    CleanupOutcome,
    CleanupRequest,
    batch_cleanup_command,
    parse_batch_cleanup_output,
)

session_ids = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)
requests = st.lists(
    st.builds(
        CleanupRequest,
        session_ids,
        wait_for_start=st.sampled_from([0.0, 0.5, 2.0, 7.25]),
        hangup=st.booleans(),
    ),
    min_size=1,
    max_size=MAX_SESSIONS_PER_CLEANUP,
    unique_by=lambda request: request.session_id,
)
VERDICTS = [CleanupOutcome.NONE, CleanupOutcome.TERMINATED, CleanupOutcome.KILLED]


@given(requests, st.sampled_from([0.0, 0.5, 2.0, 60.0]))
def test_every_session_is_in_the_argv_once_and_the_script_is_constant(
    batch: list[CleanupRequest], grace: float
) -> None:
    argv = batch_cleanup_command(batch, grace=grace)
    other = batch_cleanup_command([CleanupRequest("0" * 16)], grace=1.0)
    assert argv[:4] == [*other[:3], "kuber-exec-cleanup"]
    ids = [argument for argument in argv[5:] if len(argument) == 16]
    assert sorted(ids) == sorted(request.session_id for request in batch)
    for request in batch:
        assert request.session_id not in argv[2]
        # Its class token is the last one before it.
        position = argv.index(request.session_id)
        token = next(a for a in reversed(argv[5:position]) if len(a) != 16)
        assert token == ("h" if request.hangup else "t") + str(round(request.wait_for_start * 10))
    for argument in argv:
        assert quote_value(argument) == quote(argument, safe="")


@given(requests, st.data())
def test_the_parser_gives_every_session_exactly_its_verdict(
    batch: list[CleanupRequest], data: st.DataObject
) -> None:
    ids = [request.session_id for request in batch]
    verdicts = {i: data.draw(st.sampled_from(VERDICTS)) for i in ids}
    stdout = "".join(f"{i} {verdicts[i].value}\n" for i in ids).encode()
    assert parse_batch_cleanup_output(stdout, 0, ids) == verdicts
    # A missing line is that session's failure only; a non-zero exit fails them all.
    first, *rest = ids
    cut = "".join(f"{i} {verdicts[i].value}\n" for i in rest).encode()
    assert parse_batch_cleanup_output(cut, 0, ids) == {
        **verdicts,
        first: CleanupOutcome.FAILED,
    }
    assert set(parse_batch_cleanup_output(stdout, 1, ids).values()) == {CleanupOutcome.FAILED}


@given(st.binary(max_size=2048), st.integers(-300, 300), st.lists(session_ids, max_size=8))
def test_the_parser_never_raises_and_answers_for_every_id(
    stdout: bytes, exit_code: int, ids: list[str]
) -> None:
    outcomes = parse_batch_cleanup_output(stdout, exit_code, ids)
    assert set(outcomes) == set(ids)
    assert set(outcomes.values()) <= {*VERDICTS, CleanupOutcome.FAILED}


def test_two_different_verdicts_for_one_session_are_a_failure() -> None:
    ids = ["0123456789abcdef", "fedcba9876543210"]
    stdout = b"0123456789abcdef none\n0123456789abcdef killed\nfedcba9876543210 none\n"
    assert parse_batch_cleanup_output(stdout, 0, ids) == {
        ids[0]: CleanupOutcome.FAILED,
        ids[1]: CleanupOutcome.NONE,
    }


def test_the_builder_refuses_an_empty_oversized_or_repeated_batch() -> None:
    one = CleanupRequest("0123456789abcdef")
    with pytest.raises(ValueError, match="at least one"):
        batch_cleanup_command([], grace=1)
    with pytest.raises(ValueError, match="twice"):
        batch_cleanup_command([one, one], grace=1)
    many = [CleanupRequest(f"{n:016x}") for n in range(MAX_SESSIONS_PER_CLEANUP + 1)]
    with pytest.raises(ValueError, match="at most"):
        batch_cleanup_command(many, grace=1)


@pytest.mark.parametrize(
    ("session_id", "wait"),
    [
        ("0123456789ABCDEF", 0.0),
        ("0123", 0.0),
        ("0123456789abcdef", -1.0),
        ("0" * 16, float("nan")),
    ],
)
def test_a_request_checks_its_id_and_wait(session_id: str, wait: float) -> None:
    with pytest.raises(ValueError, match=r"hex digits|seconds|negative"):
        CleanupRequest(session_id, wait_for_start=wait)


def test_the_largest_batch_fits_an_8_kib_request_line() -> None:
    # MAX_SESSIONS_PER_CLEANUP's reason: the exec URL with the longest names Kubernetes allows
    # (a 253-character pod, 63-character namespace and container) stays under nginx's default.
    target = ResolvedTarget(
        namespace="n" * 63,
        deployment="d",
        deployment_uid="u",
        pod="p" * 253,
        pod_uid="x",
        container="c" * 63,
    )
    batch = [
        CleanupRequest(secrets.token_hex(8), wait_for_start=n % 7, hangup=n % 2 == 0)
        for n in range(MAX_SESSIONS_PER_CLEANUP)
    ]
    argv = batch_cleanup_command(batch, grace=60)
    streams = ExecStreams(stdin=False, stdout=True, stderr=True, tty=False)
    assert len(f"GET {exec_path(target, argv, streams)} HTTP/1.1") < 8192


# The script, run for real.


@pytest.fixture(scope="module")
def busybox_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox is not installed")
    tools = tmp_path_factory.mktemp("busybox")
    for applet in ("sh", "grep", "sed", "sort", "tr", "sleep"):
        (tools / applet).symlink_to(busybox)
    return str(tools)


@pytest.fixture(params=["sh", "busybox"])
def shell(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """The shell to run the script with and its environment (busybox's applets first on
    ``PATH``, so that its grep, sed and sort are the ones run)."""
    if request.param == "sh":
        return "/bin/sh", dict(os.environ)
    tools = request.getfixturevalue("busybox_path")
    return f"{tools}/sh", {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}


class Processes:
    """Processes started here, each as a session's would be; all ended at the test's end."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def session(self, session_id: str, script: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, SESSION_ENVIRONMENT_VARIABLE: session_id}
        process = subprocess.Popen(["sh", "-c", script], env=env)
        self.started.append(process)
        return process

    def prologue(self, session_id: str, script: str) -> subprocess.Popen[bytes]:
        """A prologue's shell that has not ``exec``\\ ed yet: only its ``$0`` tells it."""
        process = subprocess.Popen(["sh", "-c", script, CLEANUP_MARKER + session_id])
        self.started.append(process)
        return process


@pytest.fixture
def processes() -> Iterator[Processes]:
    started = Processes()
    yield started
    for process in started.started:
        if process.poll() is None:
            process.kill()
        process.wait()


def running(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is None


def wait_for(condition: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the processes did not start"
        time.sleep(0.02)


def has_child(process: subprocess.Popen[bytes]) -> bool:
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
    return bool(children.read_text().split())


def run_batch(
    shell: tuple[str, dict[str, str]], batch: list[CleanupRequest], grace: float
) -> tuple[dict[str, CleanupOutcome], float]:
    argv = batch_cleanup_command(batch, grace=grace)
    program, env = shell
    started = time.monotonic()
    result = subprocess.run([program, *argv[1:]], capture_output=True, env=env, timeout=30)
    took = time.monotonic() - started
    assert result.stderr == b""
    lines = result.stdout.decode().splitlines()
    assert [line.split()[0] for line in lines] == [a for a in argv[5:] if len(a) == 16]
    return parse_batch_cleanup_output(
        result.stdout, result.returncode, [r.session_id for r in batch]
    ), took


def test_one_pass_ends_every_kind_of_session(
    shell: tuple[str, dict[str, str]], processes: Processes
) -> None:
    ids = [secrets.token_hex(8) for _ in range(6)]
    polite = processes.session(ids[0], "sleep 100 & sleep 100")  # a tree: both get TERM
    stubborn = processes.session(ids[1], "trap '' TERM; sleep 100")  # sleep ignores TERM too
    hung_up = processes.session(ids[2], "trap '' TERM; sleep 100")  # ... but not HUP
    starting = processes.prologue(ids[3], "sleep 100")  # found by its $0
    # ids[4]: nothing ran; ids[5]: nothing ran yet, waited for up to 0.3 s.
    wait_for(lambda: all(has_child(p) for p in (polite, stubborn, hung_up, starting)))
    batch = [
        CleanupRequest(ids[0]),
        CleanupRequest(ids[1]),
        CleanupRequest(ids[2], hangup=True),
        CleanupRequest(ids[3]),
        CleanupRequest(ids[4]),
        CleanupRequest(ids[5], wait_for_start=0.3),
    ]
    outcomes, took = run_batch(shell, batch, grace=0.5)
    assert outcomes == {
        ids[0]: CleanupOutcome.TERMINATED,
        ids[1]: CleanupOutcome.KILLED,
        ids[2]: CleanupOutcome.TERMINATED,
        ids[3]: CleanupOutcome.TERMINATED,
        ids[4]: CleanupOutcome.NONE,
        ids[5]: CleanupOutcome.NONE,
    }
    assert 0.5 <= took < 10
    for process in (polite, stubborn, hung_up, starting):
        assert process.wait(timeout=5) < 0  # ended by a signal
    for session_id in ids:
        assert not found_in_proc(session_id)


def test_a_process_that_appears_while_it_waits_is_ended(
    shell: tuple[str, dict[str, str]], processes: Processes
) -> None:
    late, other = secrets.token_hex(8), secrets.token_hex(8)
    # Started by the batch's own clock: the script waits up to 3 s for it.
    command = batch_cleanup_command(
        [CleanupRequest(late, wait_for_start=3.0), CleanupRequest(other)], grace=0.5
    )
    program, env = shell
    cleanup = subprocess.Popen([program, *command[1:]], stdout=subprocess.PIPE, env=env)
    try:
        time.sleep(0.5)  # the process's start, late on purpose (not a synchronisation)
        process = processes.session(late, "sleep 100")
        stdout, _ = cleanup.communicate(timeout=30)
    finally:
        if cleanup.poll() is None:
            cleanup.kill()
            cleanup.wait()
    assert parse_batch_cleanup_output(stdout, cleanup.returncode, [late, other]) == {
        late: CleanupOutcome.TERMINATED,
        other: CleanupOutcome.NONE,
    }
    assert process.wait(timeout=5) < 0


def test_a_full_batch_of_sessions_is_cleaned_in_one_exec(
    shell: tuple[str, dict[str, str]], processes: Processes
) -> None:
    ids = [secrets.token_hex(8) for _ in range(MAX_SESSIONS_PER_CLEANUP)]
    started = [processes.session(session_id, "exec sleep 100") for session_id in ids]
    wait_for(lambda: all(found_in_proc(session_id) for session_id in ids[-3:]))
    outcomes, _ = run_batch(shell, [CleanupRequest(i) for i in ids], grace=2)
    assert set(outcomes.values()) == {CleanupOutcome.TERMINATED}
    assert all(process.wait(timeout=5) < 0 for process in started)


def found_in_proc(session_id: str) -> bool:
    """Whether a live process's environment holds the session's variable."""
    wanted = f"{SESSION_ENVIRONMENT_VARIABLE}={session_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                return True
        except OSError:
            continue
    return False
