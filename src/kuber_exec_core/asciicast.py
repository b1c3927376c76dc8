"""Terminal recordings as asciicast v2 (the asciinema format), without I/O.

:class:`AsciicastWriter` encodes a session's output, input, resizes and markers as the lines
of an asciicast v2 file while the session runs, keeps characters split across frames whole,
and stops at a size cap with a marker event. The async layer's recorder
(``kuber_exec_anyio``'s ``Recording``) feeds it and writes the lines to a file or a sink.
See docs/recording.md.
"""

from ._asciicast import ASCIICAST_VERSION as ASCIICAST_VERSION
from ._asciicast import DEFAULT_MAX_RECORDING_BYTES as DEFAULT_MAX_RECORDING_BYTES
from ._asciicast import AsciicastHeader as AsciicastHeader
from ._asciicast import AsciicastWriter as AsciicastWriter
from ._asciicast import EventCode as EventCode

__all__ = [
    "ASCIICAST_VERSION",
    "DEFAULT_MAX_RECORDING_BYTES",
    "AsciicastHeader",
    "AsciicastWriter",
    "EventCode",
]
