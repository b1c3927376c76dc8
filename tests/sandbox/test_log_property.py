"""The sandbox's log reading (pods/log): tailLines and limitBytes over any chunking (property)."""

from __future__ import annotations

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from kuber_exec_core.channels import Channel
from kuber_exec_sandbox._logs import LogPlan
from kuber_exec_sandbox._runtime import ContainerLog

lines = st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"") + b"\n"), max_size=20)


def read(log: ContainerLog, **options: int | None) -> bytes:
    plan = LogPlan(
        log=log,
        follow=False,
        tail_lines=options.get("tail"),
        since=None,
        timestamps=bool(options.get("timestamps")),
        limit_bytes=options.get("limit"),
    )
    out = bytearray()

    async def collect() -> None:
        async def send(data: bytes) -> None:
            out.extend(data)

        await plan.run(send)

    trio.run(collect)
    return bytes(out)


@settings(max_examples=200)
@given(lines, st.integers(0, 25), st.data())
def test_tail_is_the_last_lines_however_the_output_was_chunked(
    written: list[bytes], tail: int, data: st.DataObject
) -> None:
    text = b"".join(written)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    log = ContainerLog()
    start = 0
    for cut in [*cuts, len(text)]:
        if cut > start:
            log.append(Channel.STDOUT, text[start:cut])
            start = cut
    expected = b"".join(written[-tail:]) if tail else b""
    assert read(log, tail=tail) == expected
    assert read(log) == text
    limit = data.draw(st.integers(1, 50))
    assert read(log, limit=limit) == text[:limit]
    # Timestamps: one prefix per line, however the line was chunked.
    stamped = read(log, timestamps=1).split(b"\n")
    assert [line.split(b" ", 1)[1] for line in stamped[:-1]] == [w[:-1] for w in written]


def test_the_log_is_bounded() -> None:
    log = ContainerLog(limit=100)
    for _ in range(50):
        log.append(Channel.STDOUT, b"x" * 10)
    kept = b"".join(c.data for c in log.chunks())
    assert 90 <= len(kept) <= 100
    assert log.next_seq == 50
