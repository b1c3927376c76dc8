"""A kubeconfig's files: found and merged as kubectl does, and every bad one an ExecError naming
the file and the problem (issue 35): YAML that does not parse (line and column), a missing file,
a directory, an unreadable file, fields of the wrong type, unknown names. A fuzz over malformed
documents finds no other escape. Both runtimes' loaders, and the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kuber_exec_asyncio
import kuber_exec_trio
from kuber_exec_core import ExecError, ExecErrorCode

ADAPTERS = pytest.mark.parametrize(
    "adapter", [kuber_exec_trio, kuber_exec_asyncio], ids=["trio", "asyncio"]
)
PREFIX = "Loading the kubeconfig failed: "
TOKEN = "s3cr3t-token-value"


def good(server: str = "http://127.0.0.1:1", **user: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user or {"token": TOKEN}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }


def failure(adapter: Any, path: str | None, context: str | None = None) -> str:
    """The message of the loaders' ExecError (both entry points must agree)."""
    messages = set()
    for load in (adapter.ClusterConfig.from_kubeconfig, adapter.KubernetesBackend.from_kubeconfig):
        with pytest.raises(ExecError) as caught:
            load(path, context)
        assert caught.value.code is ExecErrorCode.FAILED
        assert caught.value.message.startswith(PREFIX)
        messages.add(caught.value.message[len(PREFIX) :])
    (message,) = messages
    return message


@ADAPTERS
def test_yaml_that_does_not_parse_names_the_file_line_and_column(
    adapter: Any, tmp_path: Path
) -> None:
    path = tmp_path / "config"
    path.write_text("apiVersion: v1\nclusters:\n  - name: c\n   cluster: [\n")
    message = failure(adapter, str(path))
    expected = f"the kubeconfig {path} is not valid YAML at line 4, column 4: did not find expected"
    assert message.startswith(expected)


@ADAPTERS
def test_a_missing_file_is_named(adapter: Any, tmp_path: Path) -> None:
    path = tmp_path / "nowhere"
    assert failure(adapter, str(path)) == f"the kubeconfig {path} does not exist"


@ADAPTERS
def test_a_directory_is_named(adapter: Any, tmp_path: Path) -> None:
    assert (
        failure(adapter, str(tmp_path)) == f"the kubeconfig {tmp_path} is a directory, not a file"
    )


@ADAPTERS
def test_an_unreadable_file_is_named(adapter: Any, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root reads any file: a directory without search permission does not stop it either,
        # so an unreadable file is a FIFO-free stand-in: a path through a file.
        path = tmp_path / "file"
        path.write_text("{}")
        inner = path / "config"
        assert f"the kubeconfig {inner} cannot be read" in failure(adapter, str(inner))
        return
    path = tmp_path / "config"
    path.write_text(json.dumps(good()))
    path.chmod(0)
    assert (
        failure(adapter, str(path)) == f"the kubeconfig {path} cannot be read (permission denied)"
    )


@ADAPTERS
def test_wrong_types_and_unknown_names_are_named(adapter: Any, tmp_path: Path) -> None:
    path = tmp_path / "config"
    cases: list[tuple[Any, str]] = [
        ([1, 2], f"the kubeconfig {path} is not a mapping (found a list)"),
        ({**good(), "clusters": {"c": {}}}, f"{path}: clusters must be a list"),
        ({**good(), "users": [{"user": {}}]}, f"{path}: users[0] has no name"),
        ({**good(), "current-context": "y"}, f"{path} has no context named 'y'"),
        ({**good(), "current-context": None}, f"{path} has no current-context; give a context"),
        ({**good(), "clusters": []}, f"{path}: context 'x' names cluster 'c', not defined"),
        ({**good(), "users": []}, f"{path}: context 'x' names user 'u', not defined"),
        (good(token=12345), f"{path}: user 'u': token must be a string"),
        (good(server=""), f"{path}: cluster 'c' has no server"),
    ]
    for document, expected in cases:
        path.write_text(json.dumps(document))
        assert failure(adapter, str(path)) == expected


@ADAPTERS
def test_kubeconfig_files_merge_as_kubectl_merges(
    adapter: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first file to name an entry wins, and the first current-context; missing files of
    # $KUBECONFIG are skipped; relative paths are against the file that holds them.
    first, second = tmp_path / "a" / "first", tmp_path / "second"
    first.parent.mkdir()
    (first.parent / "token").write_text("from-the-file\n")
    first.write_text(
        json.dumps(
            {"users": [{"name": "u", "user": {"tokenFile": "token"}}], "current-context": "x"}
        )
    )
    second.write_text(
        json.dumps({**good(server="https://example.invalid:1"), "current-context": "z"})
    )
    monkeypatch.setenv(
        "KUBECONFIG", os.pathsep.join([str(first), str(tmp_path / "gone"), str(second)])
    )
    config = adapter.ClusterConfig.from_kubeconfig()
    assert config.server == "https://example.invalid:1"
    assert config.auth_headers() == [("Authorization", "Bearer from-the-file")]
    assert repr(config) == "ClusterConfig(server='https://example.invalid:1', credentials=token)"
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "x"), str(tmp_path / "y")]))
    listed = f"{tmp_path / 'x'}, {tmp_path / 'y'}"
    expected = f"no kubeconfig found: none of $KUBECONFIG's files exists ({listed})"
    assert failure(adapter, None) == expected


def test_a_bad_kubeconfig_on_the_command_line_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("clusters: [\n")
    for argument in (str(path), str(tmp_path / "nowhere"), str(tmp_path)):
        done = subprocess.run(
            [sys.executable, "-m", "kuber_exec_cli", "exec", "--kubeconfig", argument,
             "--project", "p", "--workspace-uid", "u", "web", "--", "true"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 125
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith(f"kuber-exec: EXEC_FAILED: {PREFIX}the kubeconfig {argument} ")


def _load(path: Path) -> Any:
    """The loaded config, or the ExecError it raised (anything else propagates: a failure)."""
    try:
        return kuber_exec_trio.ClusterConfig.from_kubeconfig(str(path))
    except ExecError as error:
        return error


def _assert_named(error: ExecError) -> None:
    assert error.code is ExecErrorCode.FAILED
    assert error.message.startswith(PREFIX)


# A malformed kubeconfig: any JSON-like value in any place of a good one.
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
_PLACES = [
    (), ("clusters",), ("clusters", 0), ("clusters", 0, "name"), ("clusters", 0, "cluster"),
    ("clusters", 0, "cluster", "server"), ("clusters", 0, "cluster", "certificate-authority"),
    ("clusters", 0, "cluster", "certificate-authority-data"),
    ("clusters", 0, "cluster", "insecure-skip-tls-verify"), ("users",), ("users", 0, "user"),
    ("users", 0, "user", "token"), ("users", 0, "user", "tokenFile"),
    ("users", 0, "user", "client-certificate-data"), ("users", 0, "user", "client-key"),
    ("users", 0, "user", "username"), ("users", 0, "user", "exec"),
    ("users", 0, "user", "auth-provider"), ("contexts",), ("contexts", 0, "context"),
    ("contexts", 0, "context", "cluster"), ("contexts", 0, "context", "user"),
    ("contexts", 0, "context", "namespace"), ("current-context",),
]  # fmt: skip


def _put(document: Any, place: tuple[Any, ...], value: Any) -> Any:
    if not place:
        return value
    head, rest = place[0], place[1:]
    copy = list(document) if isinstance(document, list) else dict(document)
    copy[head] = _put(document[head], rest, value) if rest else value
    return copy


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(place=st.sampled_from(_PLACES), value=_VALUES, as_yaml=st.booleans())
def test_no_malformed_kubeconfig_escapes_as_anything_but_exec_error(
    place: tuple[Any, ...], value: Any, as_yaml: bool, tmp_path: Path
) -> None:
    import yaml

    document = _put(good(server="https://127.0.0.1:1"), place, value)
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(document) if as_yaml else json.dumps(document))
    outcome = _load(path)
    if isinstance(outcome, ExecError):
        _assert_named(outcome)
        assert TOKEN not in outcome.message
        assert TOKEN not in repr(outcome)
    else:
        assert TOKEN not in repr(outcome)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=200))
def test_no_text_escapes_as_anything_but_exec_error(text: str, tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(text)
    outcome = _load(path)
    if isinstance(outcome, ExecError):
        _assert_named(outcome)


@ADAPTERS
def test_a_token_file_is_read_again_when_the_credentials_are_refreshed(
    adapter: Any, tmp_path: Path
) -> None:
    # What a 401 triggers (test_credential_refresh.py): a rotated token file is read anew, and
    # a token file wins over a token, as in client-go.
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    path = tmp_path / "config"
    path.write_text(json.dumps(good(token="stale", tokenFile=str(token_file))))
    config = adapter.ClusterConfig.from_kubeconfig(str(path))
    assert config.auth_headers() == [("Authorization", "Bearer first")]
    assert not config.auth_headers_may_block
    token_file.write_text("second\n")
    assert config.refresh_credentials(config.credentials_generation)
    assert config.auth_headers() == [("Authorization", "Bearer second")]
    token_file.unlink()
    with pytest.raises(ExecError) as caught:
        config.refresh_credentials(config.credentials_generation)
    assert f"the user's tokenFile {token_file} cannot be read" in caught.value.message
