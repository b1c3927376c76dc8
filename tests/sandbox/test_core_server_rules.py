"""The core rules added for servers: query flags, the exec query, who answers, pre-v4 status."""

from __future__ import annotations

import json

import pytest

from kuber_exec_core import ExecError, ExecStreams, Subprotocol
from kuber_exec_core.channels import choose_subprotocol
from kuber_exec_core.server import (
    ServerChannel,
    parse_exec_flag,
    parse_exec_query,
    server_subprotocols,
    status_exit_code,
    status_failure,
    status_success,
)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], False),
        (["0"], False),
        (["false"], False),
        (["False"], False),  # the official Python client's spelling
        (["FALSE"], False),
        ([""], True),
        (["1"], True),
        (["true"], True),
        (["no"], True),
        (["false", "true"], False),  # only the first value counts
        (["true", "false"], True),
    ],
)
def test_parse_exec_flag(values: list[str], expected: bool) -> None:
    assert parse_exec_flag(values) is expected


def test_parse_exec_query_keeps_argv_order_and_forces_stderr_off_with_tty() -> None:
    query = parse_exec_query(
        [
            ("command", "sh"),
            ("stdout", "true"),
            ("command", "-c"),
            ("command", "a b"),
            ("stderr", "true"),
            ("tty", "true"),
            ("container", "app"),
        ]
    )
    assert query.command == ("sh", "-c", "a b")
    assert query.container == "app"
    assert query.streams == ExecStreams(stdin=False, stdout=True, stderr=False, tty=True)


def test_parse_exec_query_needs_a_stream() -> None:
    with pytest.raises(ExecError, match="at least 1 of stdin, stdout, stderr"):
        parse_exec_query([("command", "true"), ("tty", "true")])
    # stderr counts even though a TTY then turns it off.
    assert parse_exec_query([("stderr", "1"), ("tty", "1")]).streams.stderr is False


@pytest.mark.parametrize(
    ("offer", "v5_enabled", "chosen"),
    [
        (["v5.channel.k8s.io", "v4.channel.k8s.io"], True, Subprotocol.V5),
        (["v4.channel.k8s.io", "v5.channel.k8s.io"], True, Subprotocol.V5),
        (["v4.channel.k8s.io", "v5.channel.k8s.io"], False, Subprotocol.V4),
        (["v5.channel.k8s.io"], False, None),
        (["base64.channel.k8s.io", "v4.channel.k8s.io"], True, Subprotocol.BASE64),
        ([], True, Subprotocol.LEGACY),
        (["nope"], True, None),
    ],
)
def test_server_subprotocols_then_choose(
    offer: list[str], v5_enabled: bool, chosen: Subprotocol | None
) -> None:
    assert choose_subprotocol(offer, server_subprotocols(offer, v5_enabled=v5_enabled)) == chosen


@pytest.mark.parametrize("protocol", [Subprotocol.LEGACY, Subprotocol.BASE64])
def test_status_message_pre_v4(protocol: Subprotocol) -> None:
    channel = ServerChannel(protocol)
    assert channel.status_message(status_success()) is None
    assert channel.status_message(status_exit_code(2)) == channel.status(
        b"command terminated with non-zero exit code: exit status 2"
    )
    assert channel.status_message(status_failure("boom")) == channel.status(
        b"Internal error occurred: boom"
    )


@pytest.mark.parametrize("protocol", [Subprotocol.V5, Subprotocol.V4, Subprotocol.V4_BASE64])
def test_status_message_v4_and_v5_is_the_status_json(protocol: Subprotocol) -> None:
    channel = ServerChannel(protocol)
    message = channel.status_message(status_exit_code(2))
    assert message == channel.status(status_exit_code(2))
    assert json.loads(status_success()) == {"metadata": {}, "status": "Success"}
