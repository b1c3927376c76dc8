"""Shared sessions (``SessionHost``): viewers attach, drop and resume, roles, the grace period,
join tokens and the audit trail, for both adapters."""

from __future__ import annotations

import re
from typing import Any

import anyio
import pytest

from kuber_exec_core import Error, ExecError, ExecErrorCode, Exit, Resize, Stdin
from kuber_exec_core.sharing import Chunk, Missed, Role, SharingRefusal
from support import backend_for, eventually
from support import demo_request as run

pytestmark = pytest.mark.anyio

_SEQ = re.compile(rb"(?:\d+\r\n)+")


@pytest.fixture
async def audited(adapter: Any, sandbox: Any) -> Any:
    """A service whose audit events land in ``service.events``."""
    collected: list[Any] = []
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend, audit=collected.append)
        service.events = collected
        yield service


async def _read_until(viewer: Any, marker: bytes, seen: bytearray, *, within: float = 30) -> None:
    """Read ``viewer`` into ``seen`` until ``marker`` shows up (or fail after ``within`` s)."""
    with anyio.fail_after(within):
        async for answer in viewer:
            assert isinstance(answer, Chunk), answer
            seen += answer.data
            if marker in seen:
                return
    raise AssertionError(f"the session ended before {marker!r}: {bytes(seen[-200:])!r}")


def _numbers(screen: bytes, last: int) -> None:
    """``screen`` holds ``1..last`` once each, in order, with nothing lost or repeated."""
    expected = b"".join(b"%d\r\n" % n for n in range(1, last + 1))
    runs = [match.group(0) for match in _SEQ.finditer(screen)]
    assert expected in runs, "the numbers were not one unbroken run"


async def test_a_viewer_that_drops_resumes_where_it_was(adapter: Any, audited: Any) -> None:
    # A ring far smaller than the output: while nobody watches, the process waits.
    async with adapter.SessionHost(audited, ring_bytes=2048, grace=30) as host:
        shared = await host.open(run("sh"))
        seen = bytearray()
        async with shared.attach(Role.OWNER) as owner:
            key = owner.key
            await owner.send(Stdin(b"seq 1 6000; echo E''ND\n"))
            await _read_until(owner, b"\r\n100\r\n", seen)
            position = owner.position
        assert shared.attached == 0
        # Away: the ring fills up to what the viewer had, then the process waits.
        await eventually(lambda: shared.bytes_written == position + 2048, "a full ring")
        async with shared.attach(viewer=key, resume_from=position) as owner:
            await _read_until(owner, b"END", seen)
            await owner.end()
        await shared.ended.wait()
    _numbers(bytes(seen), 6000)
    phases = [(event.phase, event.role) for event in audited.events]
    assert phases[:4] == [
        ("started", None),
        ("joined", "owner"),
        ("attached", "owner"),
        ("detached", "owner"),
    ]
    assert ("attached", "owner") in phases[4:]
    assert sorted(phases[-2:], key=str) == [("ended", None), ("left", "owner")]
    (ended,) = [event for event in audited.events if event.phase == "ended"]
    assert ended.outcome == "error"
    assert ended.error_code is ExecErrorCode.ABORTED
    assert ended.cleanup is not None  # the shell did not exit: it was cleaned up
    rows = [event.to_dict() for event in audited.events]
    assert re.fullmatch("[0-9a-f]{8}", str(rows[1]["viewer"]))
    viewers = {
        row["viewer"] for row in rows if row["phase"] != "started" and row["phase"] != "ended"
    }
    assert viewers == {rows[1]["viewer"]}
    assert key not in str(rows), "the viewer's secret key reached the audit log"
    assert "viewer" not in rows[0]


async def test_roles_and_the_owners_typing_reaches_observers(adapter: Any, service: Any) -> None:
    async with adapter.SessionHost(service) as host:
        shared = await host.open(run("sh"))
        async with (
            shared.attach(Role.OWNER, name="ann") as owner,
            shared.attach(Role.OBSERVER, name="bob") as observer,
            shared.attach("peer", name="cy") as peer,
        ):
            assert {(v.role, v.name, v.attached) for v in shared.viewers} == {
                (Role.OWNER, "ann", True),
                (Role.OBSERVER, "bob", True),
                (Role.PEER, "cy", True),
            }
            for frame in (Stdin(b"x"), Resize(10, 10)):
                with pytest.raises(ExecError) as refused:
                    await observer.send(frame)
                assert SharingRefusal.of(refused.value) is SharingRefusal.ROLE
            with pytest.raises(ExecError) as no_resize:
                await peer.send(Resize(10, 10))
            assert no_resize.value.code is ExecErrorCode.TARGET_FORBIDDEN
            with pytest.raises(ExecError):
                await peer.end()
            await owner.send(Resize(91, 17))
            await owner.send(Stdin(b"echo own''er; stty size\n"))
            watched = bytearray()
            await _read_until(observer, b"17 91", watched)
            await peer.send(Stdin(b"echo pe''er\n"))
            await _read_until(observer, b"peer", watched)
            assert b"owner" in watched
            assert shared.size == Resize(91, 17)
            await owner.end()
            frames = [answer async for answer in observer]
            assert frames[-1] == Error(ExecErrorCode.ABORTED, frames[-1].message)
            assert "ended by its owner" in frames[-1].message
    assert host.sessions == ()


async def test_a_viewer_that_never_reads_is_cut_off(adapter: Any, service: Any) -> None:
    async with adapter.SessionHost(service, ring_bytes=4096) as host:
        shared = await host.open(run("sh"))
        async with (
            shared.attach(Role.OWNER) as owner,
            shared.attach(Role.OBSERVER) as stuck,
        ):
            await owner.send(Stdin(b"seq 1 20000; echo E''ND\n"))
            seen = bytearray()
            await _read_until(owner, b"END", seen)
            _numbers(bytes(seen), 20000)
            # The stuck viewer held nothing up and costs no more than the ring.
            assert len(shared._output.ring) <= 4096
            first = await stuck.__anext__()
            assert isinstance(first, Missed)
            assert first.count > 100_000
            await owner.end()


async def test_no_viewer_for_the_grace_period_ends_the_session(adapter: Any, audited: Any) -> None:
    async with adapter.SessionHost(audited, grace=0.3) as host:
        shared = await host.open(run("sh"))
        async with shared.attach(Role.OWNER) as owner:
            await owner.send(Stdin(b"echo hi\n"))
        with anyio.fail_after(20):
            await shared.ended.wait()
        assert isinstance(shared.final_frame, Error)
        assert "no viewer for 0.3 seconds" in shared.final_frame.message
        with pytest.raises(ExecError) as gone:
            host.get(shared.id)
        assert gone.value.code is ExecErrorCode.TARGET_NOT_FOUND
        with pytest.raises(ExecError) as late:
            async with shared.attach(Role.OWNER):
                pass
        assert late.value.code is ExecErrorCode.ABORTED
    (ended,) = [event for event in audited.events if event.phase == "ended"]
    assert ended.outcome == "error"
    assert ended.cleanup is not None


async def test_an_exit_reaches_every_viewer_after_the_output(adapter: Any, service: Any) -> None:
    async with adapter.SessionHost(service) as host:
        shared = await host.open(run("sh"))
        async with shared.attach(Role.OWNER) as owner:
            await owner.send(Stdin(b"echo bye; exit 3\n"))
            answers = [answer async for answer in owner]
        assert isinstance(answers[-1], Exit)
        assert answers[-1].exit_code == 3
        assert b"bye" in b"".join(a.data for a in answers if isinstance(a, Chunk))


async def test_a_viewer_away_when_the_session_ends_comes_back_for_the_rest_and_the_exit(
    adapter: Any, audited: Any
) -> None:
    # Found by the drop soak: a page whose WebSocket broke just as its shell exited was told
    # "no such shared session" when it came back, and never learned the exit code.
    async with adapter.SessionHost(audited, grace=30) as host:
        shared = await host.open(run("sh"))
        seen = bytearray()
        async with shared.attach(Role.OWNER) as owner:
            key = owner.key
            await owner.send(Stdin(b"echo be''fore\n"))
            await _read_until(owner, b"before", seen)
            position = owner.position
            observer_connection = shared.attach(Role.OBSERVER)
            async with observer_connection as observer:
                observer_key = observer.key
            await owner.send(Stdin(b"echo af''ter; exit 7\n"))
        with anyio.fail_after(20):
            await shared.ended.wait()
        # Ended, but kept for its viewers that did not get the end: no new one may join.
        assert host.get(shared.id) is shared
        with pytest.raises(ExecError) as late:
            async with shared.attach(Role.PEER):
                pass
        assert late.value.code is ExecErrorCode.ABORTED
        async with shared.attach(viewer=key, resume_from=position) as owner:
            answers = [answer async for answer in owner]
        assert isinstance(answers[-1], Exit)
        assert answers[-1].exit_code == 7
        rest = b"".join(answer.data for answer in answers if isinstance(answer, Chunk))
        assert b"after" in rest
        assert b"before" not in rest  # nothing twice
        # The observer never comes back: the host keeps the session no longer than its grace.
        assert host.get(shared.id) is shared
        await shared.end()  # the platform's end cuts the wait
        await eventually(lambda: shared not in host.sessions, "the host forgot the session")
        with pytest.raises(ExecError) as gone:
            shared.role_of(observer_key)
        assert gone.value.code is ExecErrorCode.TARGET_NOT_FOUND
    phases = [(event.phase, event.role) for event in audited.events]
    assert phases.count(("attached", "owner")) == 2
    assert phases.count(("left", "owner")) == 1
    assert phases.count(("left", "observer")) == 1


async def test_an_ended_session_waits_at_most_its_grace_for_a_viewer_to_come_back(
    adapter: Any, service: Any
) -> None:
    async with adapter.SessionHost(service, grace=0.5) as host:
        shared = await host.open(run("sh"))
        async with shared.attach(Role.OWNER) as owner:
            key = owner.key
            await owner.send(Stdin(b"exit 4\n"))
            with anyio.fail_after(20):
                await shared.ended.wait()
        # The owner's connection went before it read the exit; it does not come back.
        started = anyio.current_time()
        await eventually(lambda: shared not in host.sessions, "the host forgot the session")
        assert anyio.current_time() - started < 20
        with pytest.raises(ExecError) as gone:
            async with shared.attach(viewer=key):
                pass
        assert gone.value.code is ExecErrorCode.TARGET_NOT_FOUND


async def test_a_viewer_that_got_the_end_leaves_and_the_host_forgets_the_session_at_once(
    adapter: Any, service: Any
) -> None:
    async with adapter.SessionHost(service, grace=3600) as host:
        shared = await host.open(run("sh"))
        async with shared.attach(Role.OWNER) as owner:
            await owner.send(Stdin(b"exit 5\n"))
            answers = [answer async for answer in owner]
        assert isinstance(answers[-1], Exit)
        assert answers[-1].exit_code == 5
        # Nobody is owed the end: no hour-long wait (``eventually`` gives up long before).
        await eventually(lambda: shared not in host.sessions, "the host forgot the session")


async def test_without_auto_ack_the_end_counts_only_once_acknowledged(
    adapter: Any, service: Any
) -> None:
    async with adapter.SessionHost(service, grace=30) as host:
        shared = await host.open(run("sh"))
        async with shared.attach(Role.OWNER, auto_ack=False) as owner:
            key = owner.key
            with pytest.raises(ExecError) as early:
                owner.acknowledge_end()
            assert early.value.code is ExecErrorCode.INVALID
            await owner.send(Stdin(b"exit 9\n"))
            async for answer in owner:
                if isinstance(answer, Chunk):
                    owner.acknowledge(answer.end)
            # Handed, but never said to be shown: the connection broke, say.
        assert host.get(shared.id) is shared
        async with shared.attach(viewer=key, auto_ack=False) as owner:
            last = [answer async for answer in owner][-1]
            assert isinstance(last, Exit)
            assert last.exit_code == 9
            owner.acknowledge_end()
        await eventually(lambda: shared not in host.sessions, "the host forgot the session")


async def test_join_tokens_and_bad_attaches(adapter: Any, service: Any) -> None:
    now = [1000.0]
    async with adapter.SessionHost(service, secret=b"k" * 32, clock=lambda: now[0]) as host:
        shared = await host.open(run("sh"))
        token = host.issue_token(shared.id, "observer", ttl=60)
        assert host.verify_token(shared.id, token).role is Role.OBSERVER
        assert "k" * 32 not in repr(host) + repr(host._signer)
        forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
        other = host.issue_token("another", Role.OWNER)
        now[0] += 61
        for offered, refusal in (
            (token, SharingRefusal.TOKEN_EXPIRED),
            (forged, SharingRefusal.TOKEN_INVALID),
            (other, SharingRefusal.TOKEN_OTHER_SESSION),
        ):
            with pytest.raises(ExecError) as refused:
                host.verify_token(shared.id, offered)
            assert SharingRefusal.of(refused.value) is refusal
            assert offered not in str(refused.value)
        for bad in ({"role": "admin"}, {"viewer": "nobody"}, {"role": "owner", "resume_from": 9}):
            with pytest.raises(ExecError) as refused_attach:
                async with shared.attach(**bad):
                    pass
            assert refused_attach.value.code in (
                ExecErrorCode.INVALID,
                ExecErrorCode.TARGET_NOT_FOUND,
            )
        with pytest.raises(ExecError):
            adapter.SessionHost(service, ring_bytes=0)
        with pytest.raises(ExecError):
            adapter.SessionHost(service, grace=float("nan"))
        # A second connection of the same viewer replaces the first.
        async with shared.attach(Role.OWNER) as first:
            second_connection = shared.attach(viewer=first.key, resume_from=0)
            async with second_connection as second:
                assert [answer async for answer in first] == []
                with pytest.raises(ExecError) as replaced:
                    await first.send(Stdin(b"x"))
                assert replaced.value.code is ExecErrorCode.ABORTED
                await second.end()
