"""Copying through the whole real path (apiserver -> kubelet -> containerd -> runc) into a
busybox pod, through the library and through ``kuber-exec cp``: on a current release over v5 (an
upload ends its input), on 1.20 over v4 (every upload is delimited by its size); busybox's tar,
head, tail and sha256sum do the remote side."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .kube import WS_MAIN, Cluster

pytestmark = pytest.mark.anyio


def target(adapter: ModuleType) -> Any:
    return adapter.CopyTarget(adapter.Workspace(project="kx-target", uid=WS_MAIN), "shell")


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


async def test_a_tree_and_a_file_go_up_and_come_back(
    adapter: ModuleType, workloads: Any, admin_service: Any, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_bytes(b"alpha\n")
    (tree / "sub" / "b.bin").write_bytes(os.urandom(5_000_000))
    (tree / "sub" / "link").symlink_to("b.bin")
    remote = f"/tmp/kx-copy-{uuid.uuid4().hex}"
    up = await adapter.copy_to_pod(admin_service, target(adapter), tree, remote)
    assert up.sha256_verified
    single = await adapter.copy_to_pod(
        admin_service, target(adapter), tree / "sub" / "b.bin", f"{remote}-one.bin"
    )
    assert single.sha256_verified
    back = await adapter.copy_from_pod(admin_service, target(adapter), remote, tmp_path / "back")
    assert back.sha256_verified
    assert listing(tmp_path / "back") == listing(tree)
    one = await adapter.copy_from_pod(
        admin_service, target(adapter), f"{remote}-one.bin", tmp_path / "one.bin"
    )
    assert one.sha256 == hashlib.sha256((tree / "sub" / "b.bin").read_bytes()).hexdigest()
    assert one.sha256_verified


async def test_a_missing_path_is_named(
    adapter: ModuleType, workloads: Any, admin_service: Any, tmp_path: Path
) -> None:
    with pytest.raises(adapter.CopyError) as caught:
        await adapter.copy_from_pod(admin_service, target(adapter), "/no/such/path", tmp_path / "x")
    assert caught.value.problem is adapter.CopyProblem.NO_SUCH_PATH


def test_the_command_line_copies_a_file_up_and_down(
    cluster: Cluster, workloads: Any, tmp_path: Path
) -> None:
    # `kuber-exec cp` as a user runs it, both ways, against the real server (an upload ends its
    # input over v5 on a current release; on 1.20 it is delimited by its size).
    data = os.urandom(3 * 1024 * 1024 + 17)
    source, back = tmp_path / "up.bin", tmp_path / "down.bin"
    source.write_bytes(data)
    remote = f"/tmp/kx-cli-{uuid.uuid4().hex[:8]}.bin"
    common = ["--kubeconfig", cluster.kubeconfig("admin"), "--project", "kx-target",
              "--workspace-uid", WS_MAIN, "--no-progress"]  # fmt: skip
    cli = [sys.executable, "-m", "kuber_exec_cli", "cp", *common]
    up = subprocess.run([*cli, str(source), f"shell:{remote}"], capture_output=True, timeout=120)
    assert up.returncode == 0, up.stderr
    down = subprocess.run([*cli, f"shell:{remote}", str(back)], capture_output=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert back.read_bytes() == data
