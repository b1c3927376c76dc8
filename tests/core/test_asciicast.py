"""The asciicast v2 writer: the format, whole characters across any chunking, the cap.

The files are read back with asciinema's own reader (``asciinema.asciicast``), not only with
``json``: a line it cannot read is a line no asciinema tool can.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from typing import Any

import pytest
from asciinema import asciicast as asciinema_asciicast
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.asciicast import (
    ASCIICAST_VERSION,
    AsciicastHeader,
    AsciicastWriter,
    EventCode,
)

BIG = 1 << 30
# Untyped views of the classes, to hand them what their annotations refuse.
_Header: Any = AsciicastHeader
_Writer: Any = AsciicastWriter


def _chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def _asciinema_events(file: bytes) -> tuple[dict[str, object], list[list[object]]]:
    """Read ``file`` with asciinema's own v2 reader: the header and every event."""
    stream = io.StringIO(file.decode("utf-8"))
    first = stream.readline()
    with asciinema_asciicast.v2.open_from_file(first, stream) as cast:
        return cast.v2_header, list(cast.events())


def _record(writer: AsciicastWriter, chunks: list[bytes], code: EventCode = "o") -> bytes:
    out = bytearray()
    for number, chunk in enumerate(chunks):
        seconds = number / 10
        out += writer.output(seconds, chunk) if code == "o" else writer.input(seconds, chunk)
    out += writer.close(len(chunks) / 10)
    return bytes(out)


@given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=40))
def test_any_chunking_of_any_bytes_decodes_to_the_same_text(data: bytes, cuts: list[int]) -> None:
    file = _record(AsciicastWriter(max_bytes=BIG), _chunked(data, cuts))
    header, events = _asciinema_events(file)
    assert header["version"] == ASCIICAST_VERSION
    text = "".join(str(event[2]) for event in events if event[1] == "o")
    # The same text as one decode of the whole stream, whatever the frames' boundaries.
    assert text == data.decode("utf-8", "replace")


@given(text=st.text(max_size=200), cuts=st.lists(st.integers(0, 800), max_size=40))
def test_valid_utf8_comes_back_exactly_and_each_event_holds_whole_characters(
    text: str, cuts: list[int]
) -> None:
    data = text.encode("utf-8")
    file = _record(AsciicastWriter(max_bytes=BIG), _chunked(data, cuts), code="i")
    _, events = _asciinema_events(file)
    assert "".join(str(event[2]) for event in events) == text
    # No event is empty and none carries a replacement character: splits never show.
    assert all(event[2] and "\ufffd" not in str(event[2]) for event in events)
    assert {event[1] for event in events} <= {"i"}


_events = st.lists(
    st.one_of(
        st.tuples(st.just("o"), st.binary(max_size=60)),
        st.tuples(st.just("e"), st.binary(max_size=60)),
        st.tuples(st.just("i"), st.binary(max_size=20)),
        st.tuples(st.just("r"), st.tuples(st.integers(1, 65535), st.integers(1, 65535))),
        st.tuples(st.just("m"), st.text(max_size=10)),
    ),
    max_size=30,
)


def _play(writer: AsciicastWriter, events: list[tuple[str, object]], times: list[float]) -> bytes:
    out = bytearray()
    for (kind, value), seconds in zip(events, times, strict=False):
        if kind == "o":
            assert isinstance(value, bytes)
            out += writer.output(seconds, value)
        elif kind == "e":
            assert isinstance(value, bytes)
            out += writer.output(seconds, value, stream="stderr")
        elif kind == "i":
            assert isinstance(value, bytes)
            out += writer.input(seconds, value)
        elif kind == "r":
            assert isinstance(value, tuple)
            out += writer.resize(seconds, *value)
        else:
            assert isinstance(value, str)
            out += writer.marker(seconds, value)
    out += writer.close(times[-1] if times else 0.0)
    return bytes(out)


@given(
    events=_events,
    times=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=30, max_size=30),
)
def test_every_file_is_asciicast_v2_with_times_that_never_go_back(
    events: list[tuple[str, object]], times: list[float]
) -> None:
    file = _play(AsciicastWriter(AsciicastHeader(command="sh"), max_bytes=BIG), events, times)
    assert file.endswith(b"\n")
    assert b"\n\n" not in file
    header, parsed = _asciinema_events(file)
    assert set(header) >= {"version", "width", "height"}
    assert header["command"] == "sh"
    assert len(parsed) == len(file.splitlines()) - 1
    seconds = [float(str(event[0])) for event in parsed]
    assert seconds == sorted(seconds)
    for _, code, data in parsed:
        assert code in ("o", "i", "r", "m")
        assert isinstance(data, str)
        if code == "r":
            columns, rows = str(data).split("x")
            assert 1 <= int(columns) <= 65535
            assert 1 <= int(rows) <= 65535


@given(events=_events, cap=st.integers(300, 3000))
def test_the_file_never_exceeds_the_cap_and_ends_with_the_marker_when_capped(
    events: list[tuple[str, object]], cap: int
) -> None:
    times = [float(number) for number in range(len(events))]
    uncapped = _play(AsciicastWriter(max_bytes=BIG), events, times)
    writer = AsciicastWriter(max_bytes=cap)
    file = _play(writer, events, times)
    assert len(file) == writer.bytes_written <= cap
    lines = file.splitlines(keepends=True)
    if writer.capped:
        # The marker is last; before it, the head of what the uncapped writer wrote: whole
        # lines, then possibly the head of the event that crossed the cap.
        marker = json.loads(lines[-1])
        assert marker[1:] == ["m", writer.cap_label]
        whole = b"".join(lines[:-2])
        assert uncapped.startswith(whole)
        for code in ("o", "i"):
            assert _text_of(uncapped, code).startswith(_text_of(file, code))
        assert len(uncapped) > len(file) - len(lines[-1])
    else:
        assert file == uncapped


def _text_of(file: bytes, code: str) -> str:
    return "".join(event[2] for event in map(json.loads, file.splitlines()[1:]) if event[1] == code)


def test_after_the_cap_nothing_more_is_written() -> None:
    writer = AsciicastWriter(max_bytes=400)
    first = writer.output(0.0, b"a" * 20)
    assert first.count(b"\n") == 2  # the header and the event
    capped = writer.output(1.0, b"b" * 400).splitlines()
    # What fits of the event that crosses the cap, then the marker.
    assert json.loads(capped[0])[:2] == [1.0, "o"]
    assert set(json.loads(capped[0])[2]) == {"b"}
    assert json.loads(capped[1]) == [1.0, "m", writer.cap_label]
    # Full up to the few digits reserved for a later marker time.
    assert 390 <= writer.bytes_written <= 400
    assert writer.capped
    assert writer.closed
    assert writer.output(2.0, b"c") == writer.input(2.0, b"d") == writer.close(3.0) == b""


def test_a_resize_before_anything_else_sets_the_header_and_later_ones_are_events() -> None:
    writer = AsciicastWriter(AsciicastHeader(timestamp=1700000000, title="t", env={"TERM": "x"}))
    assert writer.resize(0.0, 132, 43) == b""
    out = writer.output(0.5, "é".encode()) + writer.resize(0.75, 80, 24) + writer.close(1.0)
    header, *events = (json.loads(line) for line in out.splitlines())
    assert header == {
        "version": 2,
        "width": 132,
        "height": 43,
        "timestamp": 1700000000,
        "title": "t",
        "env": {"TERM": "x"},
    }
    assert events == [[0.5, "o", "é"], [0.75, "r", "80x24"]]


_SIZES = st.tuples(st.integers(1, 4), st.integers(1, 4))


@given(header=_SIZES, resizes=st.lists(_SIZES, max_size=12))
def test_a_resize_is_an_event_only_when_it_changes_the_size(
    header: tuple[int, int], resizes: list[tuple[int, int]]
) -> None:
    # A client that knew its size when the recording started still sends it once the session
    # opens, and a window manager may report the same size twice: neither is a change.
    writer = AsciicastWriter(AsciicastHeader(width=header[0], height=header[1]))
    out = writer.output(0.0, b"x")
    for columns, rows in resizes:
        out += writer.resize(1.0, columns, rows)
    written = [event[2] for event in _asciinema_events(out + writer.close(2.0))[1][1:]]
    expected, size = [], header
    for resize in resizes:
        if resize != size:
            expected.append(f"{resize[0]}x{resize[1]}")
            size = resize
    assert written == expected


def test_an_empty_recording_is_a_header_and_a_truncated_character_ends_as_fffd() -> None:
    assert AsciicastWriter().close(0.0) == b'{"version": 2, "width": 80, "height": 24}\n'
    writer = AsciicastWriter()
    assert writer.output(0.0, b"\xe2\x82") == b""  # half a euro sign: held
    out = writer.close(2.0).splitlines()
    assert json.loads(out[1]) == [2.0, "o", "\ufffd"]


def test_stdout_and_stderr_keep_their_own_unfinished_characters() -> None:
    writer = AsciicastWriter()
    out = (
        writer.output(0.0, b"\xe2\x82")
        + writer.output(0.1, b"\xc3", stream="stderr")
        + writer.output(0.2, b"\xa9", stream="stderr")
        + writer.output(0.3, b"\xac")
    )
    assert [json.loads(line)[2] for line in out.splitlines()[1:]] == ["é", "€"]


def test_times_that_go_back_are_written_as_the_last_time() -> None:
    writer = AsciicastWriter()
    out = writer.output(5.0, b"a") + writer.output(3.0, b"b")
    assert [json.loads(line)[0] for line in out.splitlines()[1:]] == [5.0, 5.0]


@pytest.mark.parametrize("seconds", [-1.0, math.nan, math.inf, True, "1"])
def test_a_bad_time_is_invalid(seconds: object) -> None:
    with pytest.raises(ExecError) as caught:
        AsciicastWriter().output(seconds, b"x")  # type: ignore[arg-type]
    assert caught.value.code is ExecErrorCode.INVALID
    assert "time" in caught.value.message


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: AsciicastHeader(width=0), "width must be between 1 and 65535"),
        (lambda: AsciicastHeader(height=70000), "height must be between 1 and 65535"),
        (lambda: AsciicastHeader(width=True), "width must be an integer"),
        (lambda: AsciicastHeader(timestamp=-1), "timestamp must be"),
        (lambda: _Header(command=["sh"]), "command must be a string"),
        (lambda: _Header(env={"TERM": 1}), "env must map strings to strings"),
        (lambda: AsciicastWriter(max_bytes=100), "max_bytes must be at least"),
        (lambda: _Writer(max_bytes=1.5), "max_bytes must be an integer"),
        (lambda: _Writer(header={"width": 1}), "header must be an AsciicastHeader"),
        (lambda: AsciicastWriter().resize(0, 0, 24), "width must be between"),
        (lambda: _Writer().marker(0, 5), "a marker's label must be a string"),
    ],
)
def test_bad_input_is_exec_invalid(make: object, words: str) -> None:
    assert callable(make)
    with pytest.raises(ExecError) as caught:
        make()
    assert caught.value.code is ExecErrorCode.INVALID
    assert words in caught.value.message


def test_the_cap_accounts_for_the_largest_header() -> None:
    # The smallest cap leaves room for the header at 65535x65535 (a resize before the first
    # event may make it that long) and for the marker: a byte less is refused.
    header = AsciicastHeader(title="x" * 200)
    with pytest.raises(ExecError) as caught:
        AsciicastWriter(header, max_bytes=300)
    smallest = int(caught.value.message.split()[5])
    with pytest.raises(ExecError):
        AsciicastWriter(header, max_bytes=smallest - 1)
    writer = AsciicastWriter(header, max_bytes=smallest)
    marker = f'[99999999.999999, "m", "{writer.cap_label}"]\n'
    assert smallest == len(_largest_header(header)) + len(marker)
    assert writer.resize(0.0, 65535, 65535) == b""
    out = writer.output(1.0, b"x")  # no room for an event: the header and the marker
    assert writer.capped
    assert len(out) <= smallest
    assert out.count(b"\n") == 2


def _largest_header(header: AsciicastHeader) -> bytes:
    return AsciicastHeader(
        width=65535, height=65535, title=header.title, command=header.command
    ).line()
