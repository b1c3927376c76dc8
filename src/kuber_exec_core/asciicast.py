"""Encoding a terminal session as asciicast v2 (the asciinema format), streaming, with a cap.

An asciicast v2 file is one JSON object per line: a header (``version`` 2, ``width``,
``height``, optional ``timestamp``, ``command``, ``title``, ``env``), then one event per line,
``[seconds, code, data]``, with ``code`` ``"o"`` output, ``"i"`` input, ``"r"`` a resize
(``"COLSxROWS"``) or ``"m"`` a marker. ``seconds`` counts from the start of the recording.

:class:`AsciicastWriter` turns a session's bytes into those lines as they happen; it never
holds more than an unfinished UTF-8 character per stream, and it never writes more than
``max_bytes`` in all. It has no clock and no file: the caller passes each event's time and
writes the bytes each call returns. The async layer's recorder (``kuber_exec_anyio``'s
``Recording``) feeds it and writes the lines to a file or a sink. See docs/recording.md.
"""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Mapping
from typing import Literal

import attrs

from ._errors import ExecError, ExecErrorCode
from ._state import MAX_TERMINAL_DIMENSION

__all__ = [
    "ASCIICAST_VERSION",
    "DEFAULT_MAX_RECORDING_BYTES",
    "AsciicastHeader",
    "AsciicastWriter",
    "EventCode",
]

ASCIICAST_VERSION = 2
#: A recording's default size cap: an hour of a busy interactive shell is a few MiB; 64 MiB
#: keeps a runaway ``yes`` or ``cat /dev/urandom`` from filling a disk, per session.
DEFAULT_MAX_RECORDING_BYTES = 64 * 1024 * 1024

EventCode = Literal["o", "i", "r", "m"]

# The cap marker is reserved as if written at this time (about three years): every later event
# is accepted only if the marker would still fit after it.
_RESERVE_SECONDS = 99_999_999.999999
_DEFAULT_SIZE = (80, 24)


def _dimension(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ExecError(ExecErrorCode.INVALID, f"{attribute.name} must be an integer")
    if not 1 <= value <= MAX_TERMINAL_DIMENSION:
        raise ExecError(
            ExecErrorCode.INVALID,
            f"{attribute.name} must be between 1 and {MAX_TERMINAL_DIMENSION}",
        )


def _optional_text(instance: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise ExecError(ExecErrorCode.INVALID, f"{attribute.name} must be a string or None")


_Pairs = tuple[tuple[str, str], ...]


def _env_pairs(value: Mapping[str, str] | _Pairs) -> _Pairs:
    pairs = tuple(value.items()) if isinstance(value, Mapping) else tuple(value)
    for pair in pairs:
        if not (
            isinstance(pair, tuple)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and isinstance(pair[1], str)
        ):
            raise ExecError(ExecErrorCode.INVALID, "env must map strings to strings")
    return pairs


def _timestamp(instance: object, attribute: attrs.Attribute[int | None], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ExecError(ExecErrorCode.INVALID, "timestamp must be a non-negative integer or None")


@attrs.frozen(kw_only=True)
class AsciicastHeader:
    """The first line of an asciicast v2 file.

    Raises ``ExecError(EXEC_INVALID)`` for a size outside 1..65535, a ``timestamp`` that is not
    a non-negative integer, or a ``command``, ``title`` or ``env`` that is not text.

    Attributes:
        width, height: the terminal's size in columns and rows when the recording starts.
        timestamp: when it started, in seconds since the Unix epoch (``None``: left out).
        command: the command that was recorded, as a shell would read it (``None``: left out).
        title: a title for players to show (``None``: left out).
        env: environment variables of the recording terminal, e.g. ``TERM`` (empty: left out);
            a mapping, kept in its order.
    """

    width: int = attrs.field(default=_DEFAULT_SIZE[0], validator=_dimension)
    height: int = attrs.field(default=_DEFAULT_SIZE[1], validator=_dimension)
    timestamp: int | None = attrs.field(default=None, validator=_timestamp)
    command: str | None = attrs.field(default=None, validator=_optional_text)
    title: str | None = attrs.field(default=None, validator=_optional_text)
    env: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_env_pairs)

    def to_json(self) -> dict[str, object]:
        """The header as a JSON object: the fields that are set, ``version`` first."""
        header: dict[str, object] = {
            "version": ASCIICAST_VERSION,
            "width": self.width,
            "height": self.height,
        }
        if self.timestamp is not None:
            header["timestamp"] = self.timestamp
        if self.command is not None:
            header["command"] = self.command
        if self.title is not None:
            header["title"] = self.title
        if self.env:
            header["env"] = dict(self.env)
        return header

    def line(self) -> bytes:
        """The header's line, newline included, as UTF-8."""
        return _line(self.to_json())


def _line(value: object) -> bytes:
    # asciinema's own separators; ensure_ascii=False keeps the file as small as the text (the
    # decoders below never produce a lone surrogate, so the result is always valid UTF-8).
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return (text + "\n").encode("utf-8")


def _event_line(seconds: float, code: EventCode, text: str) -> bytes:
    data = json.dumps(text, ensure_ascii=False)
    return f'[{seconds:.6f}, "{code}", {data}]\n'.encode()


def _decoder() -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder("utf-8")("replace")


class AsciicastWriter:
    """Encodes one session as asciicast v2 lines as its events happen; stops at ``max_bytes``.

    Each method takes the event's time in ``seconds`` since the recording started (finite and
    non-negative, else ``ExecError(EXEC_INVALID)``; a time earlier than the last one is written
    as the last one, so that events never go backwards) and returns the bytes to append to the
    file: often ``b""``, never a partial line.

    - **The header** is written with the first line that goes out, so that a :meth:`resize`
      before any other event (a terminal sends its size first) becomes the header's
      ``width``/``height`` instead of an ``"r"`` event.
    - **UTF-8**: output and input are bytes; each stream (stdout, stderr, input) has its own
      incremental decoder, so a character split across frames is written whole, in the event
      of the frame that completes it. Bytes that are not UTF-8 (an invalid or truncated
      sequence) are written as U+FFFD, one per maximal invalid subpart, as Python's
      ``bytes.decode("utf-8", "replace")`` and asciinema's own recorder do: valid text comes
      back exactly, whatever the frames' boundaries, and invalid bytes show as the replacement
      character in every player rather than breaking the file. :meth:`close` writes a character
      left unfinished at the end as U+FFFD.
    - **The cap**: the file never exceeds ``max_bytes``. Of the first event that would leave
      no room for the cap marker, only the longest head of its text that fits is written (of
      output or input; nothing of a resize or marker), then a marker event (``"m"``, labelled
      with :attr:`cap_label`), and the writer stops: every later call returns ``b""``
      (:attr:`capped` tells). The session itself is not the writer's business.

    Raises:
        ExecError: ``EXEC_INVALID`` when ``max_bytes`` is not an integer large enough for the
            header (at any size) and the cap marker.
    """

    def __init__(
        self,
        header: AsciicastHeader | None = None,
        *,
        max_bytes: int = DEFAULT_MAX_RECORDING_BYTES,
    ) -> None:
        header = AsciicastHeader() if header is None else header
        if not isinstance(header, AsciicastHeader):
            raise ExecError(ExecErrorCode.INVALID, "header must be an AsciicastHeader")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
            raise ExecError(ExecErrorCode.INVALID, "max_bytes must be an integer")
        #: The label of the marker written when the cap is reached.
        self.cap_label = f"recording stopped: the size cap of {max_bytes} bytes was reached"
        self._reserve = len(_event_line(_RESERVE_SECONDS, "m", self.cap_label))
        largest = attrs.evolve(
            header, width=MAX_TERMINAL_DIMENSION, height=MAX_TERMINAL_DIMENSION
        ).line()
        if len(largest) + self._reserve > max_bytes:
            raise ExecError(
                ExecErrorCode.INVALID,
                f"max_bytes must be at least {len(largest) + self._reserve} for this header "
                "and the cap marker",
            )
        self._header = header
        # The terminal's size as last recorded (the header's, then each "r" event's).
        self._size = (header.width, header.height)
        self._max_bytes = max_bytes
        self._started = False
        self._stopped = False
        self._last = 0.0
        self._stdout, self._stderr, self._input = _decoder(), _decoder(), _decoder()
        #: Bytes returned so far (the file's size).
        self.bytes_written = 0
        #: Whether the cap was reached (then nothing more is written).
        self.capped = False

    def __repr__(self) -> str:
        state = "capped" if self.capped else "stopped" if self._stopped else "open"
        return f"<AsciicastWriter {self.bytes_written}/{self._max_bytes} bytes {state}>"

    @property
    def header(self) -> AsciicastHeader:
        """The header, as written (or as it will be, while no line has gone out)."""
        return self._header

    @property
    def max_bytes(self) -> int:
        """The cap: the file's size never exceeds it."""
        return self._max_bytes

    @property
    def closed(self) -> bool:
        """Whether the writer has stopped: closed, or capped."""
        return self._stopped

    def output(
        self, seconds: float, data: bytes, *, stream: Literal["stdout", "stderr"] = "stdout"
    ) -> bytes:
        """An ``"o"`` event for ``data`` received on ``stream`` (stderr too is terminal output;
        its own decoder keeps the two streams' characters apart)."""
        decoder = self._stderr if stream == "stderr" else self._stdout
        return self._text(seconds, "o", decoder, data)

    def input(self, seconds: float, data: bytes) -> bytes:
        """An ``"i"`` event for ``data`` sent to the process (keystrokes)."""
        return self._text(seconds, "i", self._input, data)

    def resize(self, seconds: float, columns: int, rows: int) -> bytes:
        """An ``"r"`` event (``"COLSxROWS"``); before any other line, the header's size. A size
        the terminal already has is no event (``b""``): a client that knew its size when the
        recording started (the header's) still sends it once the session opens.

        Raises ``ExecError(EXEC_INVALID)`` for a size outside 1..65535.
        """
        seconds = self._time(seconds)
        if not self._started:
            self._header = attrs.evolve(self._header, width=columns, height=rows)
            self._size = (columns, rows)
            return b""
        size = AsciicastHeader(width=columns, height=rows)
        if (size.width, size.height) == self._size:
            return b""
        line = self._emit(seconds, "r", f"{size.width}x{size.height}")
        if line:
            self._size = (size.width, size.height)
        return line

    def marker(self, seconds: float, label: str = "") -> bytes:
        """An ``"m"`` event: a point players let the viewer jump to."""
        if not isinstance(label, str):
            raise ExecError(ExecErrorCode.INVALID, "a marker's label must be a string")
        return self._emit(self._time(seconds), "m", label)

    def close(self, seconds: float) -> bytes:
        """The end of the recording: what the decoders still held (as U+FFFD), and the header
        if nothing was written yet (an empty recording is a valid file). Then the writer is
        closed: every later call returns ``b""``."""
        seconds = self._time(seconds)
        lines = bytearray()
        for code, decoder in (("o", self._stdout), ("o", self._stderr), ("i", self._input)):
            if text := decoder.decode(b"", final=True):
                lines += self._emit(seconds, code, text)  # type: ignore[arg-type]
        if not self._stopped and not self._started:
            lines += self._start()
        self._stopped = True
        return bytes(lines)

    def _time(self, seconds: float) -> float:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ExecError(ExecErrorCode.INVALID, "an event's time must be a number of seconds")
        if not math.isfinite(seconds) or seconds < 0:
            raise ExecError(
                ExecErrorCode.INVALID, "an event's time must be finite and not negative"
            )
        self._last = max(self._last, float(seconds))
        return self._last

    def _text(
        self, seconds: float, code: EventCode, decoder: codecs.IncrementalDecoder, data: bytes
    ) -> bytes:
        seconds = self._time(seconds)
        if self._stopped:
            return b""
        text = decoder.decode(data)
        return self._emit(seconds, code, text) if text else b""

    def _start(self) -> bytes:
        self._started = True
        line = self._header.line()
        self.bytes_written += len(line)
        return line

    def _emit(self, seconds: float, code: EventCode, text: str) -> bytes:
        if self._stopped:
            return b""
        head = b"" if self._started else self._start()
        line = _event_line(seconds, code, text)
        if self.bytes_written + len(line) + self._reserve <= self._max_bytes:
            self.bytes_written += len(line)
            return head + line
        # The cap: this event does not fit with the marker after it. Of output or input, the
        # longest head that fits goes out; then the marker, and nothing more.
        self._stopped = self.capped = True
        room = self._max_bytes - self.bytes_written - self._reserve
        if code in ("o", "i") and (head_line := _longest_fitting(seconds, code, text, room)):
            self.bytes_written += len(head_line)
            head += head_line
        marker = _event_line(seconds, "m", self.cap_label)
        if self.bytes_written + len(marker) > self._max_bytes:
            return head  # Only after about three years of recording: no room for the marker.
        self.bytes_written += len(marker)
        return head + marker


def _longest_fitting(seconds: float, code: EventCode, text: str, room: int) -> bytes:
    """The event line of the longest head of ``text`` that fits in ``room`` bytes (``b""`` if
    none does): a bisection, since escapes make a line's length uneven in its characters."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if len(_event_line(seconds, code, text[:middle])) <= room:
            low = middle
        else:
            high = middle - 1
    return _event_line(seconds, code, text[:low]) if low else b""
