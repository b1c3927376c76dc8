"""Tar without I/O: a streaming reader and writer, and the rules for extracting safely.

Files move into and out of a pod as a tar stream over exec (``tar x`` reads stdin, ``tar c``
writes stdout), as ``kubectl cp`` does. This module holds every part of that which is not I/O:

- :class:`TarReader` reads an archive fed in pieces of any size (ustar, GNU long names, pax
  headers, base-256 numbers) and yields a :class:`TarMember`, :class:`MemberData` views,
  :class:`MemberEnd` for each member, then :class:`ArchiveEnd`.
- :class:`TarWriter` produces an archive member by member (ustar, pax where a field is too
  small); file data passes through unchanged.
- :class:`ExtractionPolicy` decides for each member of an untrusted archive what may be created
  and where (:class:`Extraction`, :class:`Skipped`), refusing every shape of the ``kubectl cp``
  CVEs with a :class:`TarError`.

Reading an archive from a pod into a local directory, the I/O left out::

    reader, policy = TarReader(), ExtractionPolicy()
    while True:
        event = reader.next_event()
        if event is NEED_DATA:
            piece = receive()  # b"" at the end of the stream
            reader.feed(piece) if piece else reader.end_of_input()
        elif isinstance(event, TarMember):
            decision = policy.decide(event)  # raises TarError on a hostile member
            ...  # create decision.path (or skip it)
        elif isinstance(event, MemberData):
            ...  # write event.data to the open file
        elif isinstance(event, MemberEnd):
            ...  # close it
        else:  # ArchiveEnd
            break
"""

from ._format import DEFAULT_MAX_COMPONENT_BYTES as DEFAULT_MAX_COMPONENT_BYTES
from ._format import DEFAULT_MAX_MEMBERS as DEFAULT_MAX_MEMBERS
from ._format import DEFAULT_MAX_METADATA_BYTES as DEFAULT_MAX_METADATA_BYTES
from ._format import DEFAULT_MAX_PATH_BYTES as DEFAULT_MAX_PATH_BYTES
from ._format import DEFAULT_MAX_TOTAL_BYTES as DEFAULT_MAX_TOTAL_BYTES
from ._format import TarError as TarError
from ._format import TarKind as TarKind
from ._format import TarLimits as TarLimits
from ._format import TarMember as TarMember
from ._policy import Extraction as Extraction
from ._policy import ExtractionPolicy as ExtractionPolicy
from ._policy import Skipped as Skipped
from ._policy import SymlinkRule as SymlinkRule
from ._reader import MAX_DATA_EVENT_BYTES as MAX_DATA_EVENT_BYTES
from ._reader import ArchiveEnd as ArchiveEnd
from ._reader import MemberData as MemberData
from ._reader import MemberEnd as MemberEnd
from ._reader import TarEvent as TarEvent
from ._reader import TarReader as TarReader
from ._writer import TarWriter as TarWriter

__all__ = [
    # Reading
    "TarReader",
    "TarEvent",
    "TarMember",
    "TarKind",
    "MemberData",
    "MemberEnd",
    "ArchiveEnd",
    "MAX_DATA_EVENT_BYTES",
    # Writing
    "TarWriter",
    # Extracting
    "ExtractionPolicy",
    "Extraction",
    "Skipped",
    "SymlinkRule",
    # Budgets and errors
    "TarLimits",
    "TarError",
    "DEFAULT_MAX_MEMBERS",
    "DEFAULT_MAX_TOTAL_BYTES",
    "DEFAULT_MAX_PATH_BYTES",
    "DEFAULT_MAX_COMPONENT_BYTES",
    "DEFAULT_MAX_METADATA_BYTES",
]
