"""Percent-encoding of one URL component, as ``urllib.parse.quote(value, safe="")`` does it,
faster: the exec URL's values (docs/protocol.md) and the API paths' segments both use it."""

from __future__ import annotations

import re
from urllib.parse import quote

__all__ = ["quote_once", "quote_value"]

# What ``quote(value, safe="")`` leaves as it is: RFC 3986's unreserved characters.
_UNRESERVED_CHARACTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~"
# A value made only of them is its own encoding (most argv elements, every valid name).
_UNRESERVED_TEXT = re.compile(f"[{re.escape(_UNRESERVED_CHARACTERS)}]*")
# Every other ASCII character to its percent-encoding, for ``str.translate``: one C loop over
# the value instead of a Python call per byte.
_ASCII_QUOTED = {
    code: f"%{code:02X}" for code in range(128) if chr(code) not in _UNRESERVED_CHARACTERS
}
# Constant arguments sent with many execs (the supervised prologue and the cleanup script, a few
# hundred characters each), encoded once: ``str.translate`` with multi-character replacements
# costs about 0.1 us per character, which for the prologue was ~45 us of every exec.
_QUOTED_ONCE: dict[str, str] = {}


def quote_once(value: str) -> None:
    """Encode the constant ``value`` now; :func:`quote_value` then returns it without work.

    For the core's own scripts only (a handful of module constants): never for a caller's
    arguments, which must not outlive their exec in memory.
    """
    _QUOTED_ONCE[value] = quote_value(value)


def quote_value(value: str) -> str:
    """``value`` percent-encoded as a query component or path segment: exactly
    ``urllib.parse.quote(value, safe="")`` (UTF-8 for non-ASCII), computed faster for ASCII
    text."""
    quoted = _QUOTED_ONCE.get(value)
    if quoted is not None:
        return quoted
    if value.isascii():
        if _UNRESERVED_TEXT.fullmatch(value):
            return value
        return value.translate(_ASCII_QUOTED)
    return quote(value, safe="")
