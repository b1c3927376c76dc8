"""A kubeconfig whose TLS material is broken is ExecError(EXEC_FAILED) naming the field at fault,
never a raw ssl error and never a pass phrase prompt (issue 11, item 10). The certificates are
made for each run with the openssl command line."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kuber_exec_asyncio
import kuber_exec_trio
from kuber_exec_core import ExecError, ExecErrorCode

SRC = Path(__file__).resolve().parents[2] / "src"
NOT_A_CERTIFICATE = (
    b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
)


def openssl(*arguments: str) -> None:
    subprocess.run(["openssl", *arguments], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    if shutil.which("openssl") is None:
        reason = "the openssl command line is needed to make test certificates"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp("kubeconfig")
    cert, key, other = directory / "c.crt", directory / "c.key", directory / "other.key"
    encrypted = directory / "encrypted.key"
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(key),
        "-out", str(cert), "-subj", "/CN=kuber-exec-test-client",
    )  # fmt: skip
    openssl("genrsa", "-out", str(other), "2048")
    openssl("rsa", "-aes256", "-in", str(key), "-out", str(encrypted), "-passout", "pass:secret")
    return {
        "cert": cert.read_bytes(),
        "key": key.read_bytes(),
        "other_key": other.read_bytes(),
        "encrypted_key": encrypted.read_bytes(),
    }


def kubeconfig(path: Path, *, ca: bytes | None = None, cert: bytes, key: bytes) -> Path:
    def data(value: bytes) -> str:
        return base64.b64encode(value).decode()

    cluster: dict[str, Any] = {"server": "https://127.0.0.1:1"}
    if ca is not None:
        cluster["certificate-authority-data"] = data(ca)
    user = {"client-certificate-data": data(cert), "client-key-data": data(key)}
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(json.dumps(document))
    return path


CASES: dict[str, tuple[Callable[[dict[str, bytes]], dict[str, bytes]], str]] = {
    "mismatched-key": (
        lambda m: {"cert": m["cert"], "key": m["other_key"]},
        "the user's client-key-data does not match its client-certificate-data",
    ),
    "garbage-ca": (
        lambda m: {"ca": NOT_A_CERTIFICATE, "cert": m["cert"], "key": m["key"]},
        "the cluster's certificate-authority-data is not a usable PEM CA certificate",
    ),
    "encrypted-key": (
        lambda m: {"cert": m["cert"], "key": m["encrypted_key"]},
        "the user's client-key-data is encrypted; kuber-exec never prompts for a pass phrase",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("adapter", [kuber_exec_trio, kuber_exec_asyncio], ids=["trio", "asyncio"])
def test_broken_tls_material_names_its_field(
    adapter: Any, case: str, material: dict[str, bytes], tmp_path: Path
) -> None:
    fields, expected = CASES[case]
    path = kubeconfig(tmp_path / "config", **fields(material))
    for load in (adapter.ClusterConfig.from_kubeconfig, adapter.KubernetesBackend.from_kubeconfig):
        with pytest.raises(ExecError) as caught:
            load(str(path))
        assert caught.value.code is ExecErrorCode.FAILED
        assert caught.value.message.startswith(f"Loading the kubeconfig failed: {expected}")
        assert "BEGIN" not in caught.value.message


def test_the_good_material_loads(material: dict[str, bytes], tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", cert=material["cert"], key=material["key"])
    config = kuber_exec_trio.ClusterConfig.from_kubeconfig(str(path))
    assert (
        repr(config)
        == "ClusterConfig(server='https://127.0.0.1:1', credentials=client-certificate)"
    )


LOAD = """
import sys
from kuber_exec_anyio import ClusterConfig
from kuber_exec_core import ExecError
try:
    ClusterConfig.from_kubeconfig(sys.argv[1])
except ExecError as error:
    print(error.message)
"""


def test_an_encrypted_key_never_prompts_even_on_a_terminal(
    material: dict[str, bytes], tmp_path: Path
) -> None:
    # On a terminal, OpenSSL's default callback asks "Enter PEM pass phrase:" and blocks.
    import fcntl
    import termios

    path = kubeconfig(tmp_path / "config", cert=material["cert"], key=material["encrypted_key"])
    controller, terminal = os.openpty()

    def take_the_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        completed = subprocess.run(
            [sys.executable, "-c", LOAD, str(path)],
            stdin=terminal,
            capture_output=True,
            preexec_fn=take_the_terminal,
            env={"PYTHONPATH": str(SRC), "PATH": os.environ.get("PATH", "")},
            timeout=20,  # a prompt blocks: this fails with TimeoutExpired
            check=False,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert completed.returncode == 0, completed.stderr
    assert "never prompts for a pass phrase" in completed.stdout.decode()
