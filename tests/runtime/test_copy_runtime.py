"""Copying into and out of a container of containerd's real CRI streaming server (busybox):
the same ``copy_to_pod`` / ``copy_from_pod`` the sandbox tests run, through ``RuntimeBackend``.
The container's file system is not the test's, so what arrived is read back by a copy down."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kuber_exec_core.copy import UPLOAD_CHUNK_MIB

from .cri_runtime import CriRuntime
from .runtime_backend import DEPLOYMENT, WORKSPACE, RuntimeBackend

pytestmark = pytest.mark.anyio


@pytest.fixture
def service(adapter: ModuleType, cri_runtime: CriRuntime) -> Any:
    return adapter.ExecService(RuntimeBackend(cri_runtime, adapter.connect_exec))


def listing(root: Path) -> dict[str, object]:
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[name] = os.readlink(path)
        elif path.is_dir():
            found[name] = "dir"
        else:
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


async def test_a_tree_and_a_file_round_trip(
    adapter: ModuleType, service: Any, tmp_path: Path
) -> None:
    target = adapter.CopyTarget(WORKSPACE, DEPLOYMENT)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_bytes(b"alpha\n")
    (tree / "sub" / "b.bin").write_bytes(os.urandom(3_000_000))
    (tree / "sub" / "link").symlink_to("b.bin")
    remote = f"/tmp/kx-copy-{uuid.uuid4().hex}"
    up = await adapter.copy_to_pod(service, target, tree, remote)
    assert up.sha256_verified
    back = await adapter.copy_from_pod(service, target, remote, tmp_path / "back")
    assert back.sha256_verified
    assert listing(tmp_path / "back") == listing(tree)
    one = await adapter.copy_from_pod(service, target, f"{remote}/sub/b.bin", tmp_path / "one")
    assert (tmp_path / "one").read_bytes() == (tree / "sub" / "b.bin").read_bytes()
    assert one.sha256_verified
    with pytest.raises(adapter.CopyError) as caught:
        await adapter.copy_from_pod(service, target, f"{remote}/missing", tmp_path / "x")
    assert caught.value.problem is adapter.CopyProblem.NO_SUCH_PATH


async def test_a_file_of_several_chunks_goes_up_summed_by_busybox(
    adapter: ModuleType, service: Any, tmp_path: Path
) -> None:
    # busybox's dd and sha256sum: the upload's chunks are read back while the next arrives.
    target = adapter.CopyTarget(WORKSPACE, DEPLOYMENT)
    local = tmp_path / "chunks.bin"
    local.write_bytes(os.urandom(2 * UPLOAD_CHUNK_MIB * 1024 * 1024 + 777))
    remote = f"/tmp/kx-chunks-{uuid.uuid4().hex}"
    up = await adapter.copy_to_pod(service, target, local, remote)
    assert up.sha256_verified
    assert up.sha256 == hashlib.sha256(local.read_bytes()).hexdigest()
    back = await adapter.copy_from_pod(service, target, remote, tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == local.read_bytes()
    assert back.sha256 == up.sha256
