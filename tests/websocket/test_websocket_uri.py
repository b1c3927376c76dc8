"""``websocket_uri`` is ``websockets``' ``parse_uri`` with the server part parsed once: for any
URL, the same answer (or the same error)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.uri import WebSocketURI, parse_uri

from kuber_exec_core import ExecStreams, ResolvedTarget
from kuber_exec_core.kube import exec_path
from kuber_exec_core.supervision import Supervision
from kuber_exec_websocket._upgrade import websocket_uri

SERVERS = st.sampled_from(
    [
        "ws://127.0.0.1:8080",
        "wss://Example.COM",
        "ws://h",
        "wss://[::1]:6443",
        "ws://user:secret@h:1",
        "http://h",
        "ws://h:notaport",
        "ws:/h",
        "",
    ]
) | st.text(alphabet="wsh1:/?#@[]. \t", max_size=14)
# Printable ASCII and a few others: what urllib keeps, drops (tabs, newlines) or splits on.
PATHS = st.text(
    alphabet=st.characters(codec="ascii") | st.sampled_from(["é", "\u2028"]), max_size=40
)


def outcome(parse: object, url: str) -> WebSocketURI | str:
    try:
        return parse(url)  # type: ignore[operator,no-any-return]
    except Exception as error:
        return type(error).__name__


@settings(max_examples=500)
@given(SERVERS, PATHS)
def test_any_url_is_parsed_as_parse_uri_parses_it(server: str, path: str) -> None:
    for url in (server + path, server + "/" + path):
        assert outcome(websocket_uri, url) == outcome(parse_uri, url)


@given(st.lists(st.text(max_size=20), min_size=1, max_size=4))
def test_an_exec_url_is_parsed_as_parse_uri_parses_it(command: list[str]) -> None:
    target = ResolvedTarget(
        namespace="demo",
        deployment="web",
        deployment_uid="d",
        pod="web-1",
        pod_uid="p",
        container="app",
    )
    argv = Supervision("0123456789abcdef").supervised_command(command)
    url = "wss://api.example:6443" + exec_path(target, argv, ExecStreams())
    assert websocket_uri(url) == parse_uri(url)
