"""SPDY/3 header blocks: the name/value block and its zlib compression.

A header block is a 32-bit count, then for each header a 32-bit length and the lowercase name, a
32-bit length and the value (several values joined by NUL). It travels zlib-compressed with the
SPDY/3 dictionary, **one compression context per direction for the whole session**: each block
is the next piece of one zlib stream, ended by a sync flush. So blocks must be compressed and
decompressed in frame order, and a lost or reordered block breaks every later one.

Decompression is bounded: a block that inflates past the budget (a zlib bomb: a few bytes that
expand to megabytes) ends the session before the memory is spent.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping

from ._errors import PortForwardProtocolError

__all__ = [
    "DEFAULT_HEADER_BUDGET",
    "SPDY3_DICTIONARY",
    "HeaderCompressor",
    "HeaderDecompressor",
    "decode_header_block",
    "encode_header_block",
]

# The SPDY/3 header compression dictionary, as the SPDY/3 draft defines it (section 2.6.10.1):
# 65 length-prefixed header names and values, then a run of status lines, dates and types.
_DICTIONARY_WORDS = (
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
)
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
SPDY3_DICTIONARY: bytes = b"".join(
    struct.pack(">I", len(word)) + word.encode("ascii") for word in _DICTIONARY_WORDS
) + _DICTIONARY_TAIL.encode("ascii")

#: How many bytes one decompressed header block may take. Port-forward's blocks hold three
#: short headers; 16 KiB is generous and still tiny.
DEFAULT_HEADER_BUDGET = 16 * 1024

_U32 = struct.Struct(">I")


def encode_header_block(headers: Mapping[str, str]) -> bytes:
    """The uncompressed name/value block; names are lowercased as SPDY requires."""
    parts = [_U32.pack(len(headers))]
    for name, value in headers.items():
        raw_name, raw_value = name.lower().encode("utf-8"), value.encode("utf-8")
        parts += [_U32.pack(len(raw_name)), raw_name, _U32.pack(len(raw_value)), raw_value]
    return b"".join(parts)


def decode_header_block(block: bytes) -> dict[str, str]:
    """Parse an uncompressed name/value block into lowercase names and their values (several
    values stay joined by NUL).

    Raises:
        PortForwardProtocolError: a length past the block's end, bytes after the last header, an
            empty, repeated or uppercase name, or a name or value that is not UTF-8.
    """
    view = memoryview(block)
    offset = 0

    def take() -> bytes:
        nonlocal offset
        if offset + 4 > len(view):
            raise PortForwardProtocolError("a header block ends inside a length")
        size = _U32.unpack_from(view, offset)[0]
        offset += 4
        if size > len(view) - offset:
            raise PortForwardProtocolError("a header block's length runs past its end")
        value = bytes(view[offset : offset + size])
        offset += size
        return value

    if len(view) < 4:
        raise PortForwardProtocolError("a header block shorter than its count")
    count = _U32.unpack_from(view)[0]
    offset = 4
    if count > len(view) // 8:
        raise PortForwardProtocolError(f"a header block announces {count} headers")
    headers: dict[str, str] = {}
    for _ in range(count):
        try:
            name, value = take().decode("utf-8"), take().decode("utf-8")
        except UnicodeDecodeError:
            raise PortForwardProtocolError("a header is not UTF-8") from None
        if not name or name != name.lower() or name in headers:
            raise PortForwardProtocolError(f"a header block has a bad or repeated name {name!r}")
        headers[name] = value
    if offset != len(view):
        raise PortForwardProtocolError("a header block has bytes after its last header")
    return headers


class HeaderCompressor:
    """This side's compression context: every block it sends, in order."""

    def __init__(self) -> None:
        self._zlib = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zdict=SPDY3_DICTIONARY)

    def compress(self, headers: Mapping[str, str]) -> bytes:
        raw = encode_header_block(headers)
        return self._zlib.compress(raw) + self._zlib.flush(zlib.Z_SYNC_FLUSH)


class HeaderDecompressor:
    """The peer's compression context: every block it sent, in order, each inflated within
    ``budget`` bytes.

    Raises (from ``decompress``):
        PortForwardProtocolError: a block that is not the next piece of the peer's zlib stream,
            that inflates past the budget, or whose name/value block is malformed. The context
            is unusable afterwards (as the session is).
    """

    def __init__(self, budget: int = DEFAULT_HEADER_BUDGET) -> None:
        self._zlib = zlib.decompressobj(zdict=SPDY3_DICTIONARY)
        self._budget = budget

    def decompress(self, block: bytes) -> dict[str, str]:
        try:
            raw = self._zlib.decompress(block, self._budget + 1)
        except zlib.error:
            raise PortForwardProtocolError("a header block is not valid zlib data") from None
        if len(raw) > self._budget or self._zlib.unconsumed_tail:
            raise PortForwardProtocolError(f"a header block inflates past {self._budget} bytes")
        if self._zlib.eof:
            raise PortForwardProtocolError("a header block ended the peer's zlib stream")
        return decode_header_block(raw)
