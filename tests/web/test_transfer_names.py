"""The pure parts of the browser terminal's file transfer: upload names and download headers."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_web._transfer import _disposition, _file_name, _Refusal


@given(st.text(min_size=1, max_size=80))
def test_an_upload_name_is_one_path_component_or_refused(name: str) -> None:
    bad = "/" in name or "\0" in name or name in (".", "..") or len(name.encode()) > 255
    if bad:
        with pytest.raises(_Refusal) as caught:
            _file_name(name)
        assert caught.value.status == 400
    else:
        assert _file_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "/etc/passwd", "x\0y", "é" * 128])
def test_these_upload_names_are_refused(name: str) -> None:
    with pytest.raises(_Refusal):
        _file_name(name)


@given(st.lists(st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s), min_size=1))
def test_a_downloads_disposition_is_a_header_naming_the_files_basename(parts: list[str]) -> None:
    path = "/" + "/".join(parts)
    header = _disposition(path)
    header.encode("latin-1")  # A header value: encodable, so it can be sent at all.
    assert "\r" not in header
    assert "\n" not in header
    fallback, _, encoded = header.partition("; filename*=UTF-8''")
    assert unquote(encoded, errors="surrogateescape") == parts[-1]
    quoted = fallback.removeprefix('attachment; filename="').removesuffix('"')
    assert '"' not in quoted
    assert "\\" not in quoted
