"""Port-forward's rules on the tunnel and the legacy channels, both ends."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kuber_exec_core import NEED_DATA, ExecError, ExecErrorCode
from kuber_exec_core.portforward import (
    ConnectionData,
    ConnectionEnded,
    ConnectionEOF,
    ConnectionErrorStreamEnded,
    ConnectionFailed,
    ConnectionReady,
    ConnectionRequested,
    ConnectionWritable,
    LegacyClient,
    LegacyData,
    LegacyServer,
    PortForwardProtocolError,
    TunnelClient,
    TunnelEvent,
    TunnelPong,
    TunnelServer,
    check_port,
    is_tunnel_refusal,
    legacy_query,
)
from kuber_exec_core.portforward._spdy_frames import RstStatus, data_frame, syn_stream_frame
from kuber_exec_core.portforward._spdy_headers import HeaderCompressor
from kuber_exec_core.portforward._spdy_session import StreamOpened


def events(tunnel: TunnelClient | TunnelServer) -> list[TunnelEvent]:
    """The tunnel's events, without window announcements and pongs."""
    out: list[TunnelEvent] = []
    while (event := tunnel.next_event()) is not NEED_DATA:
        if not isinstance(event, ConnectionWritable | TunnelPong):
            out.append(event)
    return out


def pipe(client: TunnelClient, server: TunnelServer) -> None:
    while True:
        up, down = client.data_to_send(), server.data_to_send()
        if not up and not down:
            return
        server.receive_data(up)
        client.receive_data(down)


def opened() -> tuple[TunnelClient, TunnelServer, str]:
    client, server = TunnelClient(), TunnelServer()
    request = client.open_connection(8080)
    pipe(client, server)
    assert events(server) == [ConnectionRequested(request, 8080)]
    assert [e for e in events(client) if isinstance(e, ConnectionReady)] == [
        ConnectionReady(request)
    ]
    return client, server, request


def test_the_client_opens_an_error_and_a_data_stream_with_kubectls_headers() -> None:
    client = TunnelClient()
    client.data_to_send()
    request = client.open_connection(5432)
    server = TunnelServer()
    server.session.data_to_send()
    server.session.receive_data(client.data_to_send())
    opened_streams = []
    while (event := server.session.next_event()) is not NEED_DATA:
        if isinstance(event, StreamOpened):
            opened_streams.append((event.stream_id, dict(event.headers)))
    assert opened_streams == [
        (1, {"streamtype": "error", "port": "5432", "requestid": request}),
        (3, {"streamtype": "data", "port": "5432", "requestid": request}),
    ]


def test_bytes_flow_both_ways_and_half_close_ends_the_connection() -> None:
    client, server, request = opened()
    client.send(request, b"GET / HTTP/1.0\r\n\r\n")
    client.close_write(request)
    pipe(client, server)
    assert events(server) == [
        ConnectionData(request, b"GET / HTTP/1.0\r\n\r\n"),
        ConnectionEOF(request),
    ]
    server.send(request, b"HTTP/1.0 200 OK\r\n\r\nhi")
    server.finish(request)
    pipe(client, server)
    assert events(client) == [
        ConnectionData(request, b"HTTP/1.0 200 OK\r\n\r\nhi"),
        ConnectionErrorStreamEnded(request),  # no failure: the error stream closed empty
        ConnectionEOF(request),
        ConnectionEnded(request, reset=False),
    ]
    assert [e for e in events(server) if isinstance(e, ConnectionEnded)] == [
        ConnectionEnded(request, reset=False)
    ]
    assert client.connections == 0
    assert server.connections == 0
    assert client.session.open_streams == 0
    assert server.session.open_streams == 0


def test_a_failure_on_the_error_stream_reaches_the_client() -> None:
    client, server, request = opened()
    message = "error forwarding port 8080 to pod web-1: connection refused"
    server.fail(request, message)
    pipe(client, server)
    got = events(client)
    assert ConnectionFailed(request, message) in got
    client.reset(request)
    pipe(client, server)
    assert client.connections == 0
    assert [e for e in events(server) if isinstance(e, ConnectionEnded)] == [
        ConnectionEnded(request, reset=True)
    ]
    assert server.connections == 0


def test_a_reset_from_the_client_ends_the_servers_connection() -> None:
    client, server, request = opened()
    client.reset(request)
    pipe(client, server)
    assert events(server) == [ConnectionEnded(request, reset=True)]
    with pytest.raises(ValueError, match="not open"):
        client.send(request, b"x")


def test_many_connections_share_one_session() -> None:
    client, server = TunnelClient(), TunnelServer()
    requests = [client.open_connection(80 + i) for i in range(50)]
    pipe(client, server)
    assert sorted(
        (e.request_id, e.port) for e in events(server) if isinstance(e, ConnectionRequested)
    ) == sorted((r, 80 + i) for i, r in enumerate(requests))
    assert len({r for r in requests}) == 50


@pytest.mark.parametrize("port", [0, -1, 65536, 10**9, True, "80", 1.5, None])
def test_ports_outside_1_to_65535_are_invalid(port: object) -> None:
    with pytest.raises(ExecError) as caught:
        check_port(port)
    assert caught.value.code is ExecErrorCode.INVALID
    with pytest.raises(ExecError):
        TunnelClient().open_connection(port)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("headers", "outcome"),
    [
        ({"streamType": "bogus", "requestID": "1", "port": "80"}, "reset"),
        ({"streamType": "data", "port": "80"}, "reset"),
    ],
)
def test_the_server_refuses_streams_it_cannot_pair(headers: dict[str, str], outcome: str) -> None:
    server = TunnelServer()
    server.data_to_send()
    compressor = HeaderCompressor()
    server.receive_data(syn_stream_frame(1, compressor.compress(headers)))
    assert events(server) == []
    assert server.data_to_send().startswith(b"\x80\x03\x00\x03")  # RST_STREAM


def test_an_unparsable_port_is_reported_on_the_error_stream() -> None:
    server = TunnelServer()
    compressor = HeaderCompressor()
    base = {"requestID": "0", "port": "http"}
    server.receive_data(
        syn_stream_frame(1, compressor.compress({**base, "streamType": "error"}))
        + syn_stream_frame(3, compressor.compress({**base, "streamType": "data"}))
    )
    assert events(server) == []
    assert b"invalid port 'http'" in server.data_to_send()


def test_a_second_data_stream_for_a_request_is_refused() -> None:
    server = TunnelServer()
    compressor = HeaderCompressor()
    base = {"requestID": "0", "port": "80", "streamType": "data"}
    server.receive_data(
        syn_stream_frame(1, compressor.compress(base))
        + syn_stream_frame(3, compressor.compress(base))
    )
    assert events(server) == []
    assert server.data_to_send().endswith(struct.pack(">II", 3, RstStatus.PROTOCOL_ERROR))


@settings(max_examples=60)
@given(
    st.lists(st.tuples(st.binary(max_size=5000), st.binary(max_size=5000)), min_size=1, max_size=5),
    st.lists(st.integers(0, 10**5), max_size=15),
)
def test_echoes_arrive_whole_through_the_tunnel_under_any_cuts(
    payloads: list[tuple[bytes, bytes]], cuts: list[int]
) -> None:
    client, server = TunnelClient(receive_window=1024), TunnelServer(receive_window=1024)
    requests = {client.open_connection(1000 + i): pair for i, pair in enumerate(payloads)}
    up = {r: bytearray() for r in requests}
    down = {r: bytearray() for r in requests}
    to_send_up = {r: pair[0] for r, pair in requests.items()}
    to_send_down: dict[str, bytes] = {}
    ended: set[str] = set()
    for _ in range(20_000):
        wire = client.data_to_send()
        points = sorted({c % (len(wire) + 1) for c in cuts})
        for start, end in zip([0, *points], [*points, len(wire)], strict=True):
            server.receive_data(wire[start:end])
        for event in events(server):
            if isinstance(event, ConnectionRequested):
                to_send_down[event.request_id] = requests[event.request_id][1]
            elif isinstance(event, ConnectionData):
                up[event.request_id] += event.data
                server.consumed(event.request_id, len(event.data))
        for request, rest in list(to_send_down.items()):
            if server.send_window(request) != 0 or not rest:
                taken = server.send(request, rest)
                to_send_down[request] = rest[taken:]
                if taken == len(rest):
                    del to_send_down[request]
                    server.finish(request)
        client.receive_data(server.data_to_send())
        for event in events(client):
            if isinstance(event, ConnectionData):
                down[event.request_id] += event.data
                client.consumed(event.request_id, len(event.data))
            elif isinstance(event, ConnectionEnded):
                ended.add(event.request_id)
        for request, rest in list(to_send_up.items()):
            if request in client._connections and client._ready(client._connections[request]):
                taken = client.send(request, rest) if rest else 0
                to_send_up[request] = rest[taken:]
                if taken == len(rest):
                    del to_send_up[request]
                    client.close_write(request)
        if ended == set(requests):
            break
    assert {r: bytes(b) for r, b in up.items()} == {r: p[0] for r, p in requests.items()}
    assert {r: bytes(b) for r, b in down.items()} == {r: p[1] for r, p in requests.items()}
    assert client.session.open_streams == 0


def test_a_broken_tunnel_raises_a_clear_error() -> None:
    client = TunnelClient()
    with pytest.raises(PortForwardProtocolError, match="port-forward protocol error"):
        client.receive_data(data_frame(99, b"x"))


# -- the fallback and the legacy channels ------------------------------------------------------


def test_the_fallback_signal_is_the_kubelets_400() -> None:
    assert is_tunnel_refusal(400, b'query parameter "port" is required\n')
    assert not is_tunnel_refusal(403, b'query parameter "port" is required')
    assert not is_tunnel_refusal(400, b"something else")


def test_legacy_ports_get_channel_pairs_with_a_2_byte_prefix() -> None:
    server, client = LegacyServer([8080, 9090]), LegacyClient([8080, 9090])
    assert server.opening_messages() == [
        b"\x00\x90\x1f",
        b"\x01\x90\x1f",
        b"\x02\x82\x23",
        b"\x03\x82\x23",
    ]
    assert [client.receive_message(m) for m in server.opening_messages()] == [None] * 4
    assert client.receive_message(server.encode(1, b"pong")) == LegacyData(1, b"pong")
    assert client.receive_message(server.error(0, "refused")) is None
    assert client.errors() == ["refused", None]
    assert [server.receive_message(m) for m in client.encode(1, b"ping")] == [(1, b"ping")]
    assert client.encode(0, b"x" * 70_000)[2] == b"\x00" + b"x" * (70_000 - 65_536)
    assert legacy_query([80, 443]) == [("ports", "80"), ("ports", "443")]


@pytest.mark.parametrize(
    "message",
    ["text", b"\x00\x50", b"\x00\x51\x00", b"\x04\x50\x00", b"\x02"],
)
def test_legacy_protocol_violations_are_errors(message: bytes | str) -> None:
    client = LegacyClient([80])
    with pytest.raises(PortForwardProtocolError):
        client.receive_message(message)


def test_legacy_data_may_follow_the_prefix_in_one_message() -> None:
    client = LegacyClient([80])
    assert client.receive_message(b"\x00\x50\x00hello") == LegacyData(0, b"hello")


def test_the_legacy_server_ignores_writes_on_error_channels() -> None:
    server = LegacyServer([80])
    assert server.receive_message(b"\x01boom") is None
    assert server.receive_message(b"") is None
    with pytest.raises(PortForwardProtocolError):
        server.receive_message("text")


def test_a_failure_written_before_a_reset_still_reaches_the_client() -> None:
    client, server, request = opened()
    connection = server._connections[request]
    server.session.send_data(connection.error_stream, b"failed to connect")
    server.session.reset(connection.error_stream)
    server.session.reset(connection.data_stream)
    pipe(client, server)
    got = events(client)
    assert got[:2] == [
        ConnectionFailed(request, "failed to connect"),
        ConnectionEnded(request, reset=True),
    ]
