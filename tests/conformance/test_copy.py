"""Copying files into and out of sandbox pods (issue 21), on both runtimes.

The pods are local processes, so a "remote" path is a directory of the test's own: what the
container wrote can be read back directly. Three Deployments: ``files`` (the host's tools),
``hostile`` (a ``tar`` earlier on its PATH that emits whatever archive the test left for it)
and ``bare`` (a PATH holding ``sh`` and the coreutils a copy needs, but no ``tar`` and no
``sha256sum``).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import subprocess
import tarfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from kuber_exec_core import ExecErrorCode, Workspace
from kuber_exec_core.copy import UPLOAD_CHUNK_MIB
from kuber_exec_core.tar import SymlinkRule
from kuber_exec_sandbox import Cluster, PodSpec, Sandbox, run_sandbox_in_thread
from support import backend_for

from .proxy import CuttingProxy

pytestmark = pytest.mark.anyio

WORKSPACE = Workspace(project="copy", uid="copy-uid")
_BARE_TOOLS = ("sh", "head", "tail", "wc", "tee", "cat", "chmod", "mkdir")


class Pods:
    """The sandbox and the directories its pods see."""

    def __init__(self, sandbox: Sandbox, hostile_archive: Path) -> None:
        self.sandbox = sandbox
        self.hostile_archive = hostile_archive


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pods]:
    root = tmp_path_factory.mktemp("copy-pods")
    path = os.environ.get("PATH", "/usr/bin:/bin")
    real_dd = shutil.which("dd")
    assert real_dd is not None

    def shadowing(name: str, tool: str, script: str) -> list[PodSpec]:
        """A pod whose PATH finds ``script`` as ``tool`` before the real tools."""
        directory = root / f"{name}-bin"
        directory.mkdir()
        (directory / tool).write_text("#!/bin/sh\n" + script)
        (directory / tool).chmod(0o755)
        return [PodSpec(env={"PATH": f"{directory}:{path}"})]

    def dd_except(case: str) -> str:
        """The real dd, except for the arguments ``case`` matches (a ``case`` branch)."""
        return f'case "$*" in\n  {case} ;;\n  *) exec "{real_dd}" "$@" ;;\nesac\n'

    archive = root / "hostile.tar"
    bare_bin = root / "bare-bin"
    bare_bin.mkdir()
    for tool in _BARE_TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (bare_bin / tool).symlink_to(found)
    cluster = Cluster()
    cluster.add_deployment("copy", "files", workspace_uid=WORKSPACE.uid, pods=[PodSpec()])
    cluster.add_deployment(
        "copy",
        "hostile",
        workspace_uid=WORKSPACE.uid,
        pods=shadowing("hostile", "tar", f'exec cat "{archive}"\n'),
    )
    cluster.add_deployment(
        "copy", "bare", workspace_uid=WORKSPACE.uid, pods=[PodSpec(env={"PATH": str(bare_bin)})]
    )
    # A dd that changes what an upload writes (every NUL byte becomes byte 1) and reads back
    # faithfully: the container holds other bytes than were sent.
    corrupting = f'"bs=65536 "*) "{real_dd}" "$@" | tr "\\\\000" "\\\\001"'
    cluster.add_deployment(
        "copy",
        "corrupting",
        workspace_uid=WORKSPACE.uid,
        pods=shadowing("corrupt", "dd", dd_except(corrupting)),
    )
    # A dd without iflag=fullblock (older busybox): a tree's download leaves as tee hands it on.
    refusing = '*fullblock*) echo "dd: invalid iflag" >&2; exit 1'
    cluster.add_deployment(
        "copy",
        "old-dd",
        workspace_uid=WORKSPACE.uid,
        pods=shadowing("old-dd", "dd", dd_except(refusing)),
    )
    cluster.add_deployment("copy", "foreign", workspace_uid="someone-else", pods=[PodSpec()])
    with run_sandbox_in_thread(cluster) as sandbox:
        yield Pods(sandbox, archive)


@pytest.fixture
async def service(adapter: Any, pods: Pods) -> Any:
    async with backend_for(adapter, pods.sandbox) as backend:
        yield adapter.ExecService(backend, audit=AUDIT.append)


AUDIT: list[Any] = []


def target(adapter: Any, deployment: str = "files") -> Any:
    return adapter.CopyTarget(WORKSPACE, deployment)


def make_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "sub" / "b.bin").write_bytes(os.urandom(300_000))
    (root / "sub" / "deeper" / "empty").write_bytes(b"")
    (root / "sub" / "link").symlink_to("b.bin")
    os.link(root / "a.txt", root / "sub" / "hard")
    (root / "sub" / "run.sh").write_bytes(b"#!/bin/sh\n")
    (root / "sub" / "run.sh").chmod(0o750)


def tree_listing(root: Path) -> dict[str, object]:
    """Every path under ``root`` with what matters of it (content hash, link target, mode)."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[name] = ("link", os.readlink(path))
        elif path.is_dir():
            found[name] = ("dir",)
        else:
            data = path.read_bytes()
            found[name] = (
                "file",
                hashlib.sha256(data).hexdigest(),
                stat.S_IMODE(path.stat().st_mode),
            )
    return found


# -- round trips ------------------------------------------------------------------------------


async def test_a_file_goes_up_and_comes_back_checked(
    adapter: Any, service: Any, tmp_path: Path
) -> None:
    local = tmp_path / "data.bin"
    payload = os.urandom(1_234_567)
    local.write_bytes(payload)
    local.chmod(0o640)
    remote = tmp_path / "remote"
    remote.mkdir()
    progress: list[tuple[int, int | None]] = []
    up = await adapter.copy_to_pod(
        service, target(adapter), local, str(remote), progress=lambda *p: progress.append(p)
    )
    assert up.remote_path == f"{remote}/data.bin"
    assert (remote / "data.bin").read_bytes() == payload
    assert stat.S_IMODE((remote / "data.bin").stat().st_mode) == 0o640
    assert up.sha256 == hashlib.sha256(payload).hexdigest()
    assert up.sha256_verified
    assert progress[-1] == (len(payload), len(payload))
    assert [done for done, _ in progress] == sorted(done for done, _ in progress)

    down_dir = tmp_path / "down"
    down_dir.mkdir()
    down = await adapter.copy_from_pod(service, target(adapter), up.remote_path, down_dir)
    assert (down_dir / "data.bin").read_bytes() == payload
    assert down.sha256 == up.sha256
    assert down.sha256_verified
    assert down.retries == 0
    assert not list(down_dir.glob("*partial*"))


async def test_a_file_of_several_chunks_is_summed_as_it_is_written(
    adapter: Any, service: Any, tmp_path: Path
) -> None:
    # The container reads each chunk back while the next one arrives: two whole chunks and a
    # partial one, each read exactly once and in order, or the sum would not match.
    chunk = UPLOAD_CHUNK_MIB * 1024 * 1024
    local = tmp_path / "chunks.bin"
    local.write_bytes(os.urandom(2 * chunk + 12_345))
    up = await adapter.copy_to_pod(service, target(adapter), local, str(tmp_path / "up.bin"))
    assert up.size == 2 * chunk + 12_345
    assert up.sha256_verified
    assert up.sha256 == hashlib.sha256(local.read_bytes()).hexdigest()
    assert (tmp_path / "up.bin").read_bytes() == local.read_bytes()


async def test_an_upload_the_container_wrote_differently_fails_its_check(
    adapter: Any, service: Any, tmp_path: Path
) -> None:
    # The sum is of the file as the container holds it, read back, not of the pipe.
    local = tmp_path / "zeros.bin"
    local.write_bytes(bytes(UPLOAD_CHUNK_MIB * 1024 * 1024 + 3))
    with pytest.raises(adapter.CopyError) as caught:
        await adapter.copy_to_pod(
            service, target(adapter, "corrupting"), local, str(tmp_path / "up.bin")
        )
    assert caught.value.problem is adapter.CopyProblem.CHECKSUM_MISMATCH


async def test_a_tree_goes_up_and_comes_back_the_same(
    adapter: Any, service: Any, tmp_path: Path
) -> None:
    source = tmp_path / "tree"
    make_tree(source)
    remote = tmp_path / "remote-tree"
    up = await adapter.copy_to_pod(service, target(adapter), source, str(remote))
    assert up.remote_path == str(remote)
    assert up.sha256_verified
    assert up.files == 5
    assert tree_listing(remote) == tree_listing(source)
    assert os.stat(remote / "sub" / "hard").st_ino == os.stat(remote / "a.txt").st_ino

    down = await adapter.copy_from_pod(service, target(adapter), str(remote), tmp_path / "back")
    assert down.sha256_verified
    assert down.files == 5
    assert tree_listing(tmp_path / "back") == tree_listing(source)


async def test_a_tree_comes_down_whole_where_dd_cannot_gather_blocks(
    adapter: Any, service: Any, tmp_path: Path
) -> None:
    # The download sends whole 64 KiB blocks through dd where it can; without the flag, the
    # stream goes straight on, and arrives whole and checked all the same.
    source = tmp_path / "tree"
    make_tree(source)
    for index in range(40):  # more than one block, in many small writes
        (source / "sub" / f"small-{index}").write_bytes(os.urandom(3_000))
    for deployment in ("files", "old-dd"):
        back = tmp_path / f"back-{deployment}"
        down = await adapter.copy_from_pod(service, target(adapter, deployment), str(source), back)
        assert down.sha256_verified
        assert down.files == 45
        assert tree_listing(back) == tree_listing(source)


async def test_streams_go_up_and_down(adapter: Any, service: Any, tmp_path: Path) -> None:
    pieces = [os.urandom(70_000) for _ in range(5)]

    async def source() -> Any:
        for piece in pieces:
            yield piece

    remote = tmp_path / "streamed"
    up = await adapter.upload_stream(
        service, target(adapter), source(), str(remote), size=350_000, mode=0o600
    )
    assert remote.read_bytes() == b"".join(pieces)
    assert up.sha256_verified
    assert stat.S_IMODE(remote.stat().st_mode) == 0o600
    received = bytearray()

    async def sink(data: bytes) -> None:
        received.extend(data)

    down = await adapter.download_stream(service, target(adapter), str(remote), sink)
    assert bytes(received) == b"".join(pieces)
    assert down.sha256 == up.sha256


async def test_a_stream_of_the_wrong_size_fails(adapter: Any, service: Any, tmp_path: Path) -> None:
    async def source() -> Any:
        yield b"x" * 10

    with pytest.raises(adapter.CopyError) as caught:
        await adapter.upload_stream(
            service, target(adapter), source(), str(tmp_path / "f"), size=11
        )
    assert caught.value.problem is adapter.CopyProblem.SIZE_MISMATCH


async def test_v4_uploads_are_delimited_by_size(
    adapter: Any, v4_sandbox: Any, tmp_path: Path
) -> None:
    local = tmp_path / "tree"
    make_tree(local)
    async with backend_for(adapter, v4_sandbox) as backend:
        service = adapter.ExecService(backend)
        web = adapter.CopyTarget(Workspace(project="demo", uid="demo-uid"), "web")
        with anyio.fail_after(60):
            tree = await adapter.copy_to_pod(service, web, local, str(tmp_path / "up"))
            single = await adapter.copy_to_pod(
                service, web, local / "sub" / "b.bin", str(tmp_path / "one.bin")
            )
    assert tree.sha256_verified
    assert single.sha256_verified
    assert tree_listing(tmp_path / "up") == tree_listing(local)
    assert (tmp_path / "one.bin").read_bytes() == (local / "sub" / "b.bin").read_bytes()


# -- resuming ---------------------------------------------------------------------------------


async def test_a_cut_download_resumes_from_the_last_byte(
    adapter: Any, pods: Pods, tmp_path: Path
) -> None:
    remote = tmp_path / "big.bin"
    payload = os.urandom(3_000_000)
    remote.write_bytes(payload)
    proxy = CuttingProxy(pods.sandbox.url, cut_after=1_000_000)
    async with (
        proxy.running(),
        adapter.KubernetesBackend(adapter.ClusterConfig(proxy.url)) as backend,
    ):
        service = adapter.ExecService(backend)
        with anyio.fail_after(60):
            result = await adapter.copy_from_pod(
                service, target(adapter), str(remote), tmp_path / "got.bin"
            )
    assert proxy.cuts == 1
    assert result.retries == 1
    assert result.sha256_verified
    assert (tmp_path / "got.bin").read_bytes() == payload


async def test_a_cut_download_without_retries_fails_and_leaves_nothing(
    adapter: Any, pods: Pods, tmp_path: Path
) -> None:
    remote = tmp_path / "big.bin"
    remote.write_bytes(os.urandom(2_000_000))
    proxy = CuttingProxy(pods.sandbox.url, cut_after=500_000)
    async with (
        proxy.running(),
        adapter.KubernetesBackend(adapter.ClusterConfig(proxy.url)) as backend,
    ):
        service = adapter.ExecService(backend)
        with pytest.raises(adapter.CopyError) as caught, anyio.fail_after(60):
            await adapter.copy_from_pod(
                service, target(adapter), str(remote), tmp_path / "got.bin", retries=0
            )
    assert caught.value.problem is adapter.CopyProblem.CONNECTION_LOST
    assert os.listdir(tmp_path) == ["big.bin"]


async def test_a_download_cut_short_with_a_clean_end_resumes_from_the_last_byte(
    adapter: Any, pods: Pods, service: Any, tmp_path: Path
) -> None:
    # What a loaded 1.37 node did to a tar stream: megabytes missing at the end, and Success.
    remote = tmp_path / "big.bin"
    payload = os.urandom(2_000_000)
    remote.write_bytes(payload)
    faults = pods.sandbox.cluster.faults
    before = faults.cut_execs
    # The probe's output goes whole; the transfer's is cut after 700 kB.
    faults.cut_exec_output_after(700_000, times=2)
    try:
        with anyio.fail_after(60):
            result = await adapter.copy_from_pod(
                service, target(adapter), str(remote), tmp_path / "got.bin"
            )
    finally:
        faults.clear()
    assert faults.cut_execs == before + 1
    assert result.retries == 1
    assert result.sha256_verified
    assert (tmp_path / "got.bin").read_bytes() == payload


async def test_a_tree_cut_short_with_a_clean_end_starts_over(
    adapter: Any, pods: Pods, service: Any, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    make_tree(tree)
    faults = pods.sandbox.cluster.faults
    before = faults.cut_execs
    faults.cut_exec_output_after(100_000, times=2)
    try:
        with anyio.fail_after(60):
            result = await adapter.copy_from_pod(
                service, target(adapter), str(tree), tmp_path / "got"
            )
    finally:
        faults.clear()
    assert faults.cut_execs == before + 1
    assert result.retries == 1
    assert result.sha256_verified
    assert tree_listing(tmp_path / "got") == tree_listing(tree)


async def test_a_tree_cut_short_without_retries_fails_and_leaves_nothing(
    adapter: Any, pods: Pods, service: Any, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    make_tree(tree)
    faults = pods.sandbox.cluster.faults
    faults.cut_exec_output_after(100_000, times=2)
    try:
        with pytest.raises(adapter.CopyError) as caught, anyio.fail_after(60):
            await adapter.copy_from_pod(
                service, target(adapter), str(tree), tmp_path / "got", retries=0
            )
    finally:
        faults.clear()
    assert caught.value.problem is adapter.CopyProblem.CONNECTION_LOST
    assert "arrived short" in caught.value.message
    assert sorted(os.listdir(tmp_path)) == ["tree"]


# -- errors -----------------------------------------------------------------------------------


async def test_remote_path_errors_are_named(adapter: Any, service: Any, tmp_path: Path) -> None:
    problem = adapter.CopyProblem
    (tmp_path / "a-file").write_bytes(b"x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "inner").write_bytes(b"y")
    cases = [
        (adapter.copy_from_pod, str(tmp_path / "missing"), tmp_path / "out", problem.NO_SUCH_PATH),
        (adapter.copy_to_pod, tmp_path / "dir", str(tmp_path / "a-file"), problem.NOT_A_DIRECTORY),
        (
            adapter.copy_to_pod,
            tmp_path / "a-file",
            str(tmp_path / "no" / "x"),
            problem.NO_SUCH_PATH,
        ),
        (adapter.copy_to_pod, tmp_path / "nothing", str(tmp_path / "x"), problem.LOCAL_PATH),
        (adapter.copy_from_pod, "/dev/null", tmp_path / "null", problem.UNSUPPORTED),
        # The local destination exists where it must be created.
        (adapter.copy_from_pod, str(tmp_path / "a-file"), tmp_path / "a-file", problem.LOCAL_PATH),
        (adapter.copy_from_pod, str(tmp_path / "dir"), tmp_path, problem.LOCAL_PATH),
    ]
    for copy, source, destination, expected in cases:
        with pytest.raises(adapter.CopyError) as caught:
            await copy(service, target(adapter), source, destination)
        assert caught.value.problem is expected, (source, destination, caught.value)
        assert caught.value.code is (
            ExecErrorCode.INVALID if expected is problem.LOCAL_PATH else ExecErrorCode.FAILED
        )
    assert (tmp_path / "a-file").read_bytes() == b"x"


async def test_a_file_is_replaced_only_when_asked(
    adapter: Any, service: Any, tmp_path: Path
) -> None:
    (tmp_path / "remote").write_bytes(b"new")
    (tmp_path / "local").write_bytes(b"old")
    await adapter.copy_from_pod(
        service, target(adapter), str(tmp_path / "remote"), tmp_path / "local", overwrite=True
    )
    assert (tmp_path / "local").read_bytes() == b"new"


async def test_another_workspaces_deployment_is_refused(
    adapter: Any, service: Any, tmp_path: Path
) -> None:
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(adapter.ExecError) as caught:
        await adapter.copy_to_pod(service, target(adapter, "foreign"), tmp_path / "f", "/tmp/x")
    assert caught.value.code is ExecErrorCode.TARGET_FORBIDDEN


@pytest.fixture(scope="module")
def small_filesystems(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A full-able tmpfs (64 KiB) and a read-only one; needs root (mount)."""
    root = tmp_path_factory.mktemp("mounts")
    full, readonly = root / "full", root / "ro"
    full.mkdir()
    readonly.mkdir()
    mounted: list[Path] = []
    try:
        for where, options in ((full, "size=64k"), (readonly, "ro,size=64k")):
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                capture_output=True,
                check=False,
            )
            if done.returncode != 0:
                reason = f"mounting a tmpfs needs root: {done.stderr.decode().strip()}"
                if os.environ.get("CI") == "true":
                    pytest.fail(reason)
                pytest.skip(reason)
            mounted.append(where)
        yield full, readonly
    finally:
        for where in mounted:
            subprocess.run(["umount", str(where)], check=True)


async def test_no_space_and_a_read_only_file_system_are_named(
    adapter: Any, service: Any, small_filesystems: tuple[Path, Path], tmp_path: Path
) -> None:
    full, readonly = small_filesystems
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(200_000))
    tree = tmp_path / "tree"
    make_tree(tree)
    for source, destination, expected in [
        (local, full, adapter.CopyProblem.NO_SPACE),
        (tree, full / "tree", adapter.CopyProblem.NO_SPACE),
        (local, readonly, adapter.CopyProblem.PERMISSION_DENIED),
        (tree, readonly / "tree", adapter.CopyProblem.PERMISSION_DENIED),
    ]:
        with pytest.raises(adapter.CopyError) as caught, anyio.fail_after(30):
            await adapter.copy_to_pod(service, target(adapter), source, str(destination))
        assert caught.value.problem is expected, (destination, caught.value)
        shutil.rmtree(full / "tree", ignore_errors=True)
        for leftover in full.iterdir():
            leftover.unlink()


async def test_without_tar_files_copy_and_directories_say_why(
    adapter: Any, service: Any, tmp_path: Path
) -> None:
    bare = target(adapter, "bare")
    local = tmp_path / "f.bin"
    local.write_bytes(os.urandom(100_000))
    up = await adapter.copy_to_pod(service, bare, local, str(tmp_path / "up.bin"))
    # No sha256sum either: the size was checked, and the result says the sum was not.
    assert not up.sha256_verified
    assert (tmp_path / "up.bin").read_bytes() == local.read_bytes()
    down = await adapter.copy_from_pod(service, bare, str(tmp_path / "up.bin"), tmp_path / "d")
    assert not down.sha256_verified
    assert (tmp_path / "d").read_bytes() == local.read_bytes()
    tree = tmp_path / "tree"
    make_tree(tree)
    for copy, source, destination in [
        (adapter.copy_to_pod, tree, str(tmp_path / "remote-tree")),
        (adapter.copy_from_pod, str(tree), tmp_path / "local-tree"),
    ]:
        with pytest.raises(adapter.CopyError) as caught:
            await copy(service, bare, source, destination)
        assert caught.value.problem is adapter.CopyProblem.NO_TAR
        assert "tar" in caught.value.message
    assert not (tmp_path / "remote-tree").exists()
    assert not (tmp_path / "local-tree").exists()


# -- a hostile tar ----------------------------------------------------------------------------


def _archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for info, data in members:
            archive.addfile(info, None if data is None else io.BytesIO(data))
    return out.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, *, data: bytes = b"", **fields: Any) -> Any:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data if kind == tarfile.REGTYPE else None


def hostile_archives(outside: Path) -> dict[str, bytes]:
    """Every shape of the kubectl cp CVEs, and the rest of what the policy refuses."""
    absolute = str(outside / "absolute")
    return {
        "dotdot": _archive(_member("./ok", data=b"ok"), _member("../escaped", data=b"pwned")),
        "absolute": _archive(_member(absolute, data=b"pwned")),
        "symlink-then-file": _archive(
            _member("l", tarfile.SYMTYPE, linkname=str(outside)),
            _member("l/owned", data=b"pwned"),
        ),
        "relative-symlink-then-file": _archive(
            _member("l", tarfile.SYMTYPE, linkname="../../outside"),
            _member("l/owned", data=b"pwned"),
        ),
        "hardlink-out": _archive(_member("h", tarfile.LNKTYPE, linkname=str(outside / "secret"))),
        "device": _archive(_member("null", tarfile.CHRTYPE, devmajor=1, devminor=3)),
        "fifo": _archive(_member("pipe", tarfile.FIFOTYPE)),
        "truncated": _archive(_member("big", data=b"z" * 5000))[:2048],
    }


async def test_a_hostile_tar_never_writes_outside_and_fails_clearly(
    adapter: Any, service: Any, pods: Pods, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    remote = tmp_path / "remote"
    remote.mkdir()
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    before = tree_listing(tmp_path)
    for shape, archive in hostile_archives(outside).items():
        pods.hostile_archive.write_bytes(archive)
        for rule in (SymlinkRule.CONTAINED, SymlinkRule.SKIP_ESCAPING):
            with pytest.raises(adapter.CopyError) as caught:
                await adapter.copy_from_pod(
                    service, target(adapter, "hostile"), str(remote), downloads, symlinks=rule
                )
            assert caught.value.problem is adapter.CopyProblem.BAD_ARCHIVE, shape
            assert caught.value.code is ExecErrorCode.FAILED
            assert "tar archive" in caught.value.message, shape
            assert tree_listing(tmp_path) == before, shape
    assert (outside / "secret").read_bytes() == b"secret"


async def test_setuid_bits_from_the_container_are_stripped(
    adapter: Any, service: Any, pods: Pods, tmp_path: Path
) -> None:
    pods.hostile_archive.write_bytes(
        _archive(
            _member("suid", data=b"#!/bin/sh\n", mode=0o4755),
            _member("sgid-dir", tarfile.DIRTYPE, mode=0o2775),
        )
    )
    remote = tmp_path / "remote"
    remote.mkdir()
    result = await adapter.copy_from_pod(
        service, target(adapter, "hostile"), str(remote), tmp_path / "got"
    )
    assert result.files == 1
    assert result.sha256_verified
    assert stat.S_IMODE((tmp_path / "got" / "suid").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "got" / "sgid-dir").stat().st_mode) == 0o775


# -- audit ------------------------------------------------------------------------------------


async def test_every_copy_is_audited_with_what_moved(
    adapter: Any, service: Any, tmp_path: Path
) -> None:
    AUDIT.clear()
    local = tmp_path / "f"
    local.write_bytes(b"hello")
    result = await adapter.copy_to_pod(service, target(adapter), local, str(tmp_path / "g"))
    with pytest.raises(adapter.CopyError):
        await adapter.copy_from_pod(
            service, target(adapter), str(tmp_path / "nope"), tmp_path / "h"
        )
    copies = [event for event in AUDIT if event.kind == "copy"]
    assert [(e.phase, e.direction, e.outcome) for e in copies] == [
        ("started", "upload", None),
        ("ended", "upload", "exit"),
        ("started", "download", None),
        ("ended", "download", "error"),
    ]
    ended = copies[1].to_dict()
    assert ended["local_path"] == str(local)
    assert ended["remote_path"] == str(tmp_path / "g")
    assert ended["sha256"] == result.sha256
    assert ended["sha256_verified"] is True
    assert ended["bytes_in"] == 5
    assert ended["pod"] is not None
    assert copies[3].error_message is not None
    assert "does not exist" in copies[3].error_message
    # The execs the copies ran are audited as usual, besides.
    assert {event.kind for event in AUDIT} == {"copy", "execute", "interactive"}


async def test_a_copy_on_behalf_of_a_user_runs_as_that_user_and_says_so(
    adapter: Any, service: Any, pods: Pods, tmp_path: Path
) -> None:
    AUDIT.clear()
    alice = adapter.Impersonation("alice", groups=("developers",))
    acting = adapter.CopyTarget(WORKSPACE, "files", on_behalf_of=alice)
    before = len(pods.sandbox.access.exec_users)
    local = tmp_path / "f"
    local.write_bytes(b"hello")
    await adapter.copy_to_pod(service, acting, local, str(tmp_path / "g"))
    await adapter.copy_from_pod(service, acting, str(tmp_path / "g"), tmp_path / "h")
    # Every exec of both copies (probes and transfers) reached the API server as alice.
    users = pods.sandbox.access.exec_users[before:]
    assert len(users) >= 4
    assert set(users) == {"alice"}
    assert {(e.kind, e.user, e.groups) for e in AUDIT} == {
        (kind, "alice", ("developers",)) for kind in ("copy", "execute", "interactive")
    }


# -- memory and cancellation ------------------------------------------------------------------


def write_random(path: Path, size: int) -> None:
    with open(path, "wb") as out:
        for _ in range(size // (1024 * 1024)):
            out.write(os.urandom(1024 * 1024))


async def test_memory_stays_flat_both_ways(adapter: Any, service: Any, tmp_path: Path) -> None:
    size = 64 * 1024 * 1024
    local = tmp_path / "big.bin"
    write_random(local, size)
    received = 0

    async def sink(data: bytes) -> None:
        nonlocal received
        received += len(data)

    tracemalloc.start()
    try:
        up = await adapter.copy_to_pod(service, target(adapter), local, str(tmp_path / "up.bin"))
        _, upload_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        await adapter.download_stream(service, target(adapter), str(tmp_path / "up.bin"), sink)
        _, download_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert up.size == size
    assert received == size
    # A fraction of the 64 MiB moved: the frames in flight and the session's bounded queue.
    assert upload_peak < 12 * 1024 * 1024, upload_peak
    assert download_peak < 12 * 1024 * 1024, download_peak


async def test_a_cancelled_download_leaves_nothing_and_is_audited(
    adapter: Any, service: Any, tmp_path: Path
) -> None:
    (tmp_path / "big.bin").write_bytes(os.urandom(4_000_000))
    AUDIT.clear()
    with anyio.CancelScope() as scope:

        def progress(done: int, total: int | None) -> None:
            if done > 1_000_000:
                scope.cancel()

        await adapter.copy_from_pod(
            service, target(adapter), str(tmp_path / "big.bin"), tmp_path / "got", progress=progress
        )
    assert scope.cancelled_caught
    assert os.listdir(tmp_path) == ["big.bin"]
    ended = [e for e in AUDIT if e.kind == "copy" and e.phase == "ended"]
    assert [(e.outcome, e.error_code) for e in ended] == [("error", ExecErrorCode.ABORTED)]
