"""A real container runtime's exec streaming server on loopback, for tests.

containerd's CRI plugin embeds the kubelet's streaming server (``pkg/cri/streaming``): the code that
answers the ``v4.channel.k8s.io`` / ``v4.base64.channel.k8s.io`` / ``base64.channel.k8s.io`` /
``channel.k8s.io`` WebSocket exec protocols in real clusters. This module:

1. makes sure containerd, runc, ctr and a static busybox are installed (``apt-get`` as root);
2. builds a tiny busybox image as an OCI image-layout tarball, in Python, without any registry;
3. starts a private containerd (root, state, sockets, runc root: all under one temporary
   directory) with the CRI plugin's streaming server on ``127.0.0.1:<free port>``;
4. imports the image with ``ctr``, runs a host-network pod sandbox and a long ``sleep`` container
   in it over the CRI gRPC API (``runtime.v1``), spoken with a small hand-written protobuf codec;
5. hands out exec URLs (``http://127.0.0.1:PORT/exec/TOKEN``, single use, valid about a minute);
6. tears everything down whatever happens: containers and sandboxes, containerd, leftover shims and
   runc containers, mounts under the temporary directory, and its cgroups.

Use :func:`running_cri_runtime` (a context manager) or the ``cri_runtime`` fixture in
``conftest.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import signal
import socket
import struct
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc

IMAGE_NAME: Final = "docker.io/library/kuber-busybox:test"
"""The busybox image's name, fully qualified (the CRI plugin normalises ``kuber-busybox:test``)."""

CRI_NAMESPACE: Final = "k8s.io"
"""The containerd namespace the CRI plugin works in (images must be imported there)."""

APT_PACKAGES: Final = ("containerd", "runc", "busybox-static")
BUSYBOX: Final = Path("/bin/busybox")

# Commands the containers run. busybox's sleep takes any unsigned number of seconds.
SLEEP_FOREVER: Final = ("/bin/sleep", "2147483647")

# Linux ``umount2`` flag: lazy detach, works even when something still holds the mount busy.
_MNT_DETACH: Final = 2

# containerd 1.6 shims always create their sockets here (runtime/v2/shim: socketRoot), whatever
# the configured state directory.
_SHIM_SOCKET_DIR: Final = Path("/run/containerd/s")

# A Unix socket path must fit ``sockaddr_un.sun_path`` (108 bytes including the NUL).
_MAX_SOCKET_PATH: Final = 100


class RuntimeUnavailable(Exception):
    """The real runtime cannot be provided here (not root, packages missing, runc fails...)."""


# --------------------------------------------------------------------------------------------
# A minimal protobuf (proto3) wire codec: just what the CRI calls below need.
# Wire types (protobuf encoding spec): 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
# --------------------------------------------------------------------------------------------

_WIRE_VARINT: Final = 0
_WIRE_FIXED64: Final = 1
_WIRE_LEN: Final = 2
_WIRE_FIXED32: Final = 5


def encode_varint(value: int) -> bytes:
    """Base-128 varint; negative numbers (int32/int64) as 64-bit two's complement (10 bytes)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


class Message:
    """Builder for one protobuf message. proto3 scalars equal to their default are omitted."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def _key(self, field: int, wire_type: int) -> None:
        self._buf += encode_varint(field << 3 | wire_type)

    def uint(self, field: int, value: int) -> Message:
        """An int32/int64/uint32/uint64/enum field."""
        if value:
            self._key(field, _WIRE_VARINT)
            self._buf += encode_varint(value)
        return self

    def flag(self, field: int, value: bool) -> Message:
        return self.uint(field, int(value))

    def blob(self, field: int, value: bytes) -> Message:
        if value:
            self._raw_len(field, value)
        return self

    def string(self, field: int, value: str) -> Message:
        return self.blob(field, value.encode())

    def message(self, field: int, value: Message) -> Message:
        """A nested message: always written, even empty (presence matters for messages)."""
        self._raw_len(field, value.build())
        return self

    def strings(self, field: int, values: Sequence[str]) -> Message:
        """A ``repeated string`` field (every element written, even empty ones)."""
        for value in values:
            self._raw_len(field, value.encode())
        return self

    def map(self, field: int, values: Mapping[str, str]) -> Message:
        """A ``map<string, string>``: repeated entry messages with key = 1, value = 2."""
        for key, value in values.items():
            self.message(field, Message().string(1, key).string(2, value))
        return self

    def _raw_len(self, field: int, value: bytes) -> None:
        self._key(field, _WIRE_LEN)
        self._buf += encode_varint(len(value))
        self._buf += value

    def build(self) -> bytes:
        return bytes(self._buf)


Fields = dict[int, list[int | bytes]]


def decode_message(data: bytes) -> Fields:
    """Decode one message into ``{field number: [values in wire order]}``.

    Varints come back as ``int``; length-delimited, fixed64 and fixed32 values as ``bytes``.
    Nested messages are decoded on demand with :func:`field_message`.
    """
    fields: Fields = {}
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        field, wire_type = key >> 3, key & 7
        value: int | bytes
        if wire_type == _WIRE_VARINT:
            value, pos = _read_varint(data, pos)
        elif wire_type == _WIRE_LEN:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated length-delimited field")
            value = data[pos : pos + length]
            pos += length
        elif wire_type == _WIRE_FIXED64:
            value = data[pos : pos + 8]
            pos += 8
        elif wire_type == _WIRE_FIXED32:
            value = data[pos : pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire_type} for field {field}")
        if field == 0:
            raise ValueError("field number 0")
        fields.setdefault(field, []).append(value)
    return fields


def _last_bytes(fields: Fields, field: int) -> bytes:
    values = fields.get(field)
    if not values:
        return b""
    value = values[-1]
    if not isinstance(value, bytes):
        raise ValueError(f"field {field} is not length-delimited")
    return value


def field_str(fields: Fields, field: int) -> str:
    return _last_bytes(fields, field).decode()


def field_int(fields: Fields, field: int) -> int:
    values = fields.get(field)
    if not values:
        return 0
    value = values[-1]
    if not isinstance(value, int):
        raise ValueError(f"field {field} is not a varint")
    return value


def field_message(fields: Fields, field: int) -> Fields | None:
    """A nested message field, or ``None`` when absent."""
    if field not in fields:
        return None
    return decode_message(_last_bytes(fields, field))


def field_messages(fields: Fields, field: int) -> list[Fields]:
    """A ``repeated`` message field."""
    out: list[Fields] = []
    for value in fields.get(field, []):
        if not isinstance(value, bytes):
            raise ValueError(f"field {field} is not length-delimited")
        out.append(decode_message(value))
    return out


# --------------------------------------------------------------------------------------------
# CRI runtime.v1 over gRPC. Field numbers from kubernetes/cri-api pkg/apis/runtime/v1/api.proto
# (package runtime.v1; services RuntimeService and ImageService). containerd 1.6 serves both
# runtime.v1 and the older runtime.v1alpha2 with the same field numbers.
# --------------------------------------------------------------------------------------------

# enum NamespaceMode { POD = 0; CONTAINER = 1; NODE = 2; TARGET = 3; }
NS_POD: Final = 0
NS_CONTAINER: Final = 1
NS_NODE: Final = 2


def _identity(data: bytes) -> bytes:
    return data


@dataclass(frozen=True)
class RuntimeVersion:
    """``VersionResponse``: version = 1, runtime_name = 2, runtime_version = 3,
    runtime_api_version = 4."""

    version: str
    runtime_name: str
    runtime_version: str
    runtime_api_version: str


class CriClient:
    """The handful of CRI calls the harness needs, with raw-bytes (de)serialisers."""

    def __init__(self, socket_path: Path, *, api: str = "runtime.v1") -> None:
        self._api = api
        self._channel = grpc.insecure_channel(
            f"unix://{socket_path}", options=[("grpc.enable_http_proxy", 0)]
        )

    def close(self) -> None:
        self._channel.close()

    def call(self, service: str, method: str, request: Message, timeout: float = 30.0) -> Fields:
        stub: Callable[..., bytes] = self._channel.unary_unary(
            f"/{self._api}.{service}/{method}",
            request_serializer=_identity,
            response_deserializer=_identity,
        )
        return decode_message(stub(request.build(), timeout=timeout))

    def version(self, timeout: float = 5.0) -> RuntimeVersion:
        # VersionRequest { string version = 1; }
        resp = self.call("RuntimeService", "Version", Message().string(1, "v1"), timeout)
        return RuntimeVersion(
            field_str(resp, 1), field_str(resp, 2), field_str(resp, 3), field_str(resp, 4)
        )

    def image_present(self, image: str) -> bool:
        # ImageStatusRequest { ImageSpec image = 1; bool verbose = 2; }, ImageSpec { image = 1 }
        # ImageStatusResponse { Image image = 1; ... }: absent when the image is unknown.
        resp = self.call("ImageService", "ImageStatus", Message().message(1, image_spec(image)))
        status = field_message(resp, 1)
        return status is not None and bool(field_str(status, 1))  # Image { string id = 1; }

    def run_pod_sandbox(self, config: Message) -> str:
        # RunPodSandboxRequest { PodSandboxConfig config = 1; string runtime_handler = 2; }
        # RunPodSandboxResponse { string pod_sandbox_id = 1; }
        resp = self.call("RuntimeService", "RunPodSandbox", Message().message(1, config), 120)
        return field_str(resp, 1)

    def create_container(self, sandbox_id: str, config: Message, sandbox_config: Message) -> str:
        # CreateContainerRequest { string pod_sandbox_id = 1; ContainerConfig config = 2;
        #                          PodSandboxConfig sandbox_config = 3; }
        # CreateContainerResponse { string container_id = 1; }
        req = Message().string(1, sandbox_id).message(2, config).message(3, sandbox_config)
        return field_str(self.call("RuntimeService", "CreateContainer", req, 60), 1)

    def start_container(self, container_id: str) -> None:
        # StartContainerRequest { string container_id = 1; }
        self.call("RuntimeService", "StartContainer", Message().string(1, container_id), 60)

    def container_state(self, container_id: str) -> int:
        # ContainerStatusRequest { string container_id = 1; bool verbose = 2; }
        # ContainerStatusResponse { ContainerStatus status = 1; }
        # ContainerStatus { ... ContainerState state = 3; }; CONTAINER_RUNNING = 1
        resp = self.call("RuntimeService", "ContainerStatus", Message().string(1, container_id))
        status = field_message(resp, 1)
        return -1 if status is None else field_int(status, 3)

    def exec(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        tty: bool,
        stdin: bool,
        stdout: bool,
        stderr: bool,
    ) -> str:
        # ExecRequest { string container_id = 1; repeated string cmd = 2; bool tty = 3;
        #               bool stdin = 4; bool stdout = 5; bool stderr = 6; }
        # ExecResponse { string url = 1; }
        req = (
            Message()
            .string(1, container_id)
            .strings(2, cmd)
            .flag(3, tty)
            .flag(4, stdin)
            .flag(5, stdout)
            .flag(6, stderr)
        )
        return field_str(self.call("RuntimeService", "Exec", req), 1)

    def list_container_ids(self) -> list[str]:
        # ListContainersRequest { ContainerFilter filter = 1; } (no filter: all)
        # ListContainersResponse { repeated Container containers = 1; }, Container { id = 1 }
        resp = self.call("RuntimeService", "ListContainers", Message())
        return [field_str(c, 1) for c in field_messages(resp, 1)]

    def list_sandbox_ids(self) -> list[str]:
        # ListPodSandboxRequest { PodSandboxFilter filter = 1; }
        # ListPodSandboxResponse { repeated PodSandbox items = 1; }, PodSandbox { id = 1 }
        resp = self.call("RuntimeService", "ListPodSandbox", Message())
        return [field_str(s, 1) for s in field_messages(resp, 1)]

    def stop_container(self, container_id: str, timeout_s: int = 0) -> None:
        # StopContainerRequest { string container_id = 1; int64 timeout = 2; }
        # timeout 0: SIGKILL at once (sleep as PID 1 ignores SIGTERM anyway).
        req = Message().string(1, container_id).uint(2, timeout_s)
        self.call("RuntimeService", "StopContainer", req, 60)

    def remove_container(self, container_id: str) -> None:
        # RemoveContainerRequest { string container_id = 1; }
        self.call("RuntimeService", "RemoveContainer", Message().string(1, container_id), 60)

    def stop_pod_sandbox(self, sandbox_id: str) -> None:
        # StopPodSandboxRequest { string pod_sandbox_id = 1; }
        self.call("RuntimeService", "StopPodSandbox", Message().string(1, sandbox_id), 60)

    def remove_pod_sandbox(self, sandbox_id: str) -> None:
        # RemovePodSandboxRequest { string pod_sandbox_id = 1; }
        self.call("RuntimeService", "RemovePodSandbox", Message().string(1, sandbox_id), 60)


def image_spec(image: str) -> Message:
    # ImageSpec { string image = 1; map<string, string> annotations = 2; ... }
    return Message().string(1, image)


def namespace_options(*, network: int, pid: int, ipc: int) -> Message:
    # NamespaceOption { NamespaceMode network = 1; NamespaceMode pid = 2; NamespaceMode ipc = 3; }
    return Message().uint(1, network).uint(2, pid).uint(3, ipc)


def pod_sandbox_config(
    *, name: str, uid: str, namespace: str, log_directory: Path, cgroup_parent: str
) -> Message:
    """A host-network pod, each container in its own PID namespace (the kubelet's default)."""
    # PodSandboxMetadata { string name = 1; string uid = 2; string namespace = 3;
    #                      uint32 attempt = 4; }
    metadata = Message().string(1, name).string(2, uid).string(3, namespace)
    # LinuxSandboxSecurityContext { NamespaceOption namespace_options = 1; ... }
    security = Message().message(
        1, namespace_options(network=NS_NODE, pid=NS_CONTAINER, ipc=NS_POD)
    )
    # LinuxPodSandboxConfig { string cgroup_parent = 1;
    #                         LinuxSandboxSecurityContext security_context = 2; ... }
    linux = Message().string(1, cgroup_parent).message(2, security)
    # PodSandboxConfig { PodSandboxMetadata metadata = 1; string hostname = 2;
    #   string log_directory = 3; DNSConfig dns_config = 4; repeated PortMapping port_mappings = 5;
    #   map<string, string> labels = 6; map<string, string> annotations = 7;
    #   LinuxPodSandboxConfig linux = 8; }
    return (
        Message()
        .message(1, metadata)
        .string(3, str(log_directory))
        .map(6, {"app.kubernetes.io/part-of": "kuber-exec-tests"})
        .message(8, linux)
    )


def container_config(*, name: str, image: str, argv: Sequence[str], log_path: str) -> Message:
    # ContainerMetadata { string name = 1; uint32 attempt = 2; }
    metadata = Message().string(1, name)
    # LinuxContainerSecurityContext { ... NamespaceOption namespace_options = 3; ... }
    security = Message().message(
        3, namespace_options(network=NS_NODE, pid=NS_CONTAINER, ipc=NS_POD)
    )
    # LinuxContainerConfig { LinuxContainerResources resources = 1;
    #                        LinuxContainerSecurityContext security_context = 2; }
    linux = Message().message(2, security)
    # ContainerConfig { ContainerMetadata metadata = 1; ImageSpec image = 2;
    #   repeated string command = 3; repeated string args = 4; string working_dir = 5;
    #   ... string log_path = 11; ... LinuxContainerConfig linux = 15; }
    return (
        Message()
        .message(1, metadata)
        .message(2, image_spec(image))
        .strings(3, argv[:1])
        .strings(4, argv[1:])
        .string(5, "/")
        .map(9, {"app.kubernetes.io/part-of": "kuber-exec-tests"})  # labels = 9
        .string(11, log_path)
        .message(15, linux)
    )


# --------------------------------------------------------------------------------------------
# The busybox image, as an OCI image-layout tarball (image-spec: image-layout.md, manifest.md,
# config.md), built from the host's static busybox. No registry involved.
# --------------------------------------------------------------------------------------------

_MT_INDEX: Final = "application/vnd.oci.image.index.v1+json"
_MT_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
_MT_CONFIG: Final = "application/vnd.oci.image.config.v1+json"
_MT_LAYER_GZIP: Final = "application/vnd.oci.image.layer.v1.tar+gzip"
_FIXED_MTIME: Final = 1_700_000_000  # deterministic archives


def _oci_arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        machine, machine
    )


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _add_entry(
    tar: tarfile.TarFile,
    name: str,
    *,
    data: bytes | None = None,
    mode: int = 0o644,
    kind: bytes = tarfile.REGTYPE,
    link: str = "",
) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = _FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.linkname = link
    if data is not None:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def busybox_applets(busybox: Path = BUSYBOX) -> list[str]:
    out = subprocess.run(
        [str(busybox), "--list"], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    return sorted({line.strip() for line in out.splitlines() if line.strip()} - {"busybox"})


def build_rootfs_layer(busybox: Path = BUSYBOX) -> bytes:
    """An uncompressed tar: ``/bin/busybox`` plus a ``/bin/<applet>`` symlink for every applet."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory, mode in (
            ("bin", 0o755),
            ("dev", 0o755),
            ("etc", 0o755),
            ("proc", 0o555),
            ("root", 0o700),
            ("run", 0o755),
            ("sys", 0o555),
            ("tmp", 0o1777),
            ("usr", 0o755),
            ("var", 0o755),
        ):
            _add_entry(tar, directory, kind=tarfile.DIRTYPE, mode=mode)
        _add_entry(tar, "bin/busybox", data=busybox.read_bytes(), mode=0o755)
        for applet in busybox_applets(busybox):
            if "/" not in applet:
                _add_entry(tar, f"bin/{applet}", kind=tarfile.SYMTYPE, mode=0o777, link="busybox")
        _add_entry(tar, "sbin", kind=tarfile.SYMTYPE, mode=0o777, link="bin")
        _add_entry(tar, "usr/bin", kind=tarfile.SYMTYPE, mode=0o777, link="../bin")
        _add_entry(tar, "usr/sbin", kind=tarfile.SYMTYPE, mode=0o777, link="../bin")
        _add_entry(tar, "etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\n")
        _add_entry(tar, "etc/group", data=b"root:x:0:\n")
    return buf.getvalue()


def build_oci_archive(
    dest: Path,
    *,
    image_name: str = IMAGE_NAME,
    cmd: Sequence[str] = SLEEP_FOREVER,
    busybox: Path = BUSYBOX,
    layer_tar: bytes | None = None,
) -> str:
    """Write an OCI image-layout tarball for ``image_name`` to ``dest``; return the manifest digest.

    The image's default command sleeps forever, so it also serves as the pod sandbox ("pause")
    image. ``layer_tar`` (an uncompressed tar) replaces the busybox root file system (the
    real-cluster tier's shell-less image).
    """
    if layer_tar is None:
        layer_tar = build_rootfs_layer(busybox)
    layer = gzip.compress(layer_tar, compresslevel=6, mtime=0)
    config = {
        "architecture": _oci_arch(),
        "os": "linux",
        "created": "2023-11-14T22:13:20Z",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": list(cmd),
            "WorkingDir": "/",
        },
        # diff_ids are the digests of the *uncompressed* layers.
        "rootfs": {"type": "layers", "diff_ids": [_sha256(layer_tar)]},
        "history": [{"created_by": "kuber-exec tests/runtime/cri_runtime.py"}],
    }
    config_blob = json.dumps(config, separators=(",", ":"), sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": _MT_MANIFEST,
        "config": {
            "mediaType": _MT_CONFIG,
            "digest": _sha256(config_blob),
            "size": len(config_blob),
        },
        "layers": [{"mediaType": _MT_LAYER_GZIP, "digest": _sha256(layer), "size": len(layer)}],
    }
    manifest_blob = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
    tag = image_name.rsplit(":", 1)[1] if ":" in image_name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": _MT_INDEX,
        "manifests": [
            {
                "mediaType": _MT_MANIFEST,
                "digest": _sha256(manifest_blob),
                "size": len(manifest_blob),
                "platform": {"architecture": _oci_arch(), "os": "linux"},
                "annotations": {
                    # containerd's importer names the image after this annotation...
                    "io.containerd.image.name": image_name,
                    # ...and standard tools after this one (a tag only).
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        ],
    }
    index_blob = json.dumps(index, separators=(",", ":"), sort_keys=True).encode()
    with tarfile.open(dest, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add_entry(tar, "oci-layout", data=b'{"imageLayoutVersion":"1.0.0"}')
        _add_entry(tar, "index.json", data=index_blob)
        _add_entry(tar, "blobs", kind=tarfile.DIRTYPE, mode=0o755)
        _add_entry(tar, "blobs/sha256", kind=tarfile.DIRTYPE, mode=0o755)
        for blob in (config_blob, layer, manifest_blob):
            _add_entry(tar, "blobs/sha256/" + hashlib.sha256(blob).hexdigest(), data=blob)
    return _sha256(manifest_blob)


# --------------------------------------------------------------------------------------------
# Packages
# --------------------------------------------------------------------------------------------


def _is_static_elf(path: Path) -> bool:
    """True for an ELF executable without a ``PT_INTERP`` program header (statically linked)."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if data[:4] != b"\x7fELF" or data[4] != 2:  # ELFCLASS64 only; that is all Debian ships here
        return False
    end = "<" if data[5] == 1 else ">"
    (phoff,) = struct.unpack_from(end + "Q", data, 0x20)
    phentsize, phnum = struct.unpack_from(end + "HH", data, 0x36)
    for i in range(phnum):
        (p_type,) = struct.unpack_from(end + "I", data, phoff + i * phentsize)
        if p_type == 3:  # PT_INTERP
            return False
    return True


def missing_tools() -> list[str]:
    missing = [
        tool
        for tool in ("containerd", "containerd-shim-runc-v2", "runc", "ctr")
        if shutil.which(tool) is None
    ]
    if not _is_static_elf(BUSYBOX):
        missing.append(f"{BUSYBOX} (static, from busybox-static)")
    return missing


def ensure_packages() -> None:
    """Install containerd, runc and busybox-static with apt-get if anything is missing (as root).

    Raises :class:`RuntimeUnavailable` with the reason when that is impossible.
    """
    missing = missing_tools()
    if not missing:
        return
    if os.geteuid() != 0:
        raise RuntimeUnavailable(f"not root and missing: {', '.join(missing)}")
    if shutil.which("apt-get") is None:
        raise RuntimeUnavailable(f"no apt-get to install: {', '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *APT_PACKAGES],
    ):
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=600, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeUnavailable(f"{' '.join(argv)} timed out") from exc
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-2000:]
            raise RuntimeUnavailable(f"{' '.join(argv)} failed ({done.returncode}): {tail}")
    still = missing_tools()
    if still:
        raise RuntimeUnavailable(f"still missing after apt-get install: {', '.join(still)}")


# --------------------------------------------------------------------------------------------
# containerd
# --------------------------------------------------------------------------------------------


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _toml_str(value: str | Path) -> str:
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def default_snapshotter() -> str:
    try:
        filesystems = Path("/proc/filesystems").read_text()
    except OSError:
        return "native"
    return "overlayfs" if "\toverlay\n" in filesystems else "native"


@dataclass(frozen=True)
class Layout:
    """Where one private containerd keeps everything."""

    base: Path
    socket_dir: Path

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def runc_root(self) -> Path:
        return self.base / "runc"

    @property
    def logs(self) -> Path:
        return self.base / "logs"

    @property
    def config(self) -> Path:
        return self.base / "config.toml"

    @property
    def containerd_log(self) -> Path:
        return self.base / "containerd.log"

    @property
    def socket(self) -> Path:
        return self.socket_dir / "containerd.sock"


def containerd_config(
    layout: Layout, *, stream_port: int, snapshotter: str, sandbox_image: str
) -> str:
    """containerd 1.6 configuration (``version = 2``) with everything under ``layout.base``."""
    q = _toml_str
    return f"""\
version = 2
root = {q(layout.root)}
state = {q(layout.state)}
oom_score = 0
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = {q(layout.socket)}

[ttrpc]
  address = {q(str(layout.socket) + ".ttrpc")}

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = {q(layout.base / "opt")}

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = {q(str(stream_port))}
  enable_tls_streaming = false
  sandbox_image = {q(sandbox_image)}
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true
  disable_cgroup = false

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = {q(snapshotter)}
    default_runtime_name = "runc"
    disable_snapshot_annotations = true

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = {q(shutil.which("runc") or "runc")}
        Root = {q(layout.runc_root)}

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {q(layout.base / "cni" / "bin")}
    conf_dir = {q(layout.base / "cni" / "conf")}
"""


def _poll(condition: Callable[[], bool], *, timeout: float, interval: float, what: str) -> None:
    """Wait until ``condition()`` is true, checking every ``interval`` s, at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise RuntimeUnavailable(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return "<no log>"


def _mount_points_under(base: Path) -> list[str]:
    """Mount points at or below ``base`` from /proc/self/mountinfo, innermost (latest) first."""
    prefix = str(base.resolve())
    found: list[str] = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
        for line in info:
            parts = line.split(" ")
            if len(parts) < 5:
                continue
            # Field 5 is the mount point, with space, tab, newline and backslash octal-escaped.
            point = parts[4].encode("latin-1", "surrogateescape").decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return found[::-1]


def unmount_all_under(base: Path) -> list[str]:
    """Lazily unmount everything mounted at or below ``base``; return what could not be."""
    libc = ctypes.CDLL(None, use_errno=True)
    failed: list[str] = []
    for _ in range(5):  # stacked mounts need several passes
        points = _mount_points_under(base)
        if not points:
            return []
        failed = []
        for point in points:
            if libc.umount2(point.encode("utf-8", "surrogateescape"), _MNT_DETACH) != 0:
                failed.append(f"{point}: {os.strerror(ctypes.get_errno())}")
    return failed


def _pids_with_arg(needle: str) -> list[int]:
    """Processes whose command line contains ``needle`` as one argument."""
    return list(_processes_with_arg(needle))


def _processes_with_arg(needle: str) -> dict[int, list[str]]:
    """``{pid: argv}`` of the processes whose command line contains ``needle`` as one argument."""
    found: dict[int, list[str]] = {}
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle.encode() in argv:
            found[int(entry.name)] = [arg.decode(errors="replace") for arg in argv]
    return found


def _shim_socket(address: Path, shim_id: str) -> Path:
    """Where containerd 1.6 puts a shim's socket: /run/containerd/s/<sha256(address/ns/id)>
    (runtime/v2/shim util_unix.go SocketAddress). A SIGKILLed shim leaves it behind."""
    digest = hashlib.sha256(os.path.join(address, CRI_NAMESPACE, shim_id).encode()).hexdigest()
    return _SHIM_SOCKET_DIR / digest


def _cgroup_dirs(name: str) -> list[Path]:
    cgroup_root = Path("/sys/fs/cgroup")
    candidates = [cgroup_root / name]
    with contextlib.suppress(OSError):
        candidates += [d / name for d in cgroup_root.iterdir() if d.is_dir()]
    return [c for c in candidates if c.is_dir()]


def remove_cgroups(name: str) -> None:
    """Remove the (by now empty) cgroup ``/<name>`` and its children in every hierarchy."""
    for top in _cgroup_dirs(name):
        for directory in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


class CriRuntime:
    """A running private containerd with one host-network pod and one long-running busybox
    container in it. Get exec URLs for that container with :meth:`exec_url`."""

    def __init__(
        self,
        layout: Layout,
        *,
        process: subprocess.Popen[bytes],
        client: CriClient,
        stream_port: int,
        version: RuntimeVersion,
        sandbox_id: str,
        container_id: str,
    ) -> None:
        self.layout = layout
        self.process = process
        self.client = client
        self.stream_port = stream_port
        self.version = version
        self.sandbox_id = sandbox_id
        self.container_id = container_id

    @property
    def stream_base_url(self) -> str:
        return f"http://127.0.0.1:{self.stream_port}"

    def exec_url(
        self,
        cmd: list[str],
        *,
        tty: bool = False,
        stdin: bool = False,
        stdout: bool = True,
        stderr: bool = True,
    ) -> str:
        """A fresh exec URL (``http://127.0.0.1:PORT/exec/TOKEN``) running ``cmd`` in the container.

        Single use (404 on reuse) and valid about a minute. Connect with a WebSocket client
        (``ws://`` instead of ``http://``) offering a ``*.channel.k8s.io`` subprotocol.
        The CRI Exec call rejects ``tty`` together with ``stderr``; like the API server does for
        ``kubectl exec -t``, ``stderr`` is dropped when ``tty`` is true.
        """
        return self.client.exec(
            self.container_id,
            cmd,
            tty=tty,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr and not tty,
        )


def _start_containerd(layout: Layout) -> subprocess.Popen[bytes]:
    containerd = shutil.which("containerd")
    if containerd is None:
        raise RuntimeUnavailable("containerd not found")
    with open(layout.containerd_log, "ab") as log:
        return subprocess.Popen(
            [containerd, "--config", str(layout.config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C reaches pytest only; we stop it
        )


def _stop_process(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace)


def _run_tool(argv: Sequence[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)


@contextlib.contextmanager
def running_cri_runtime(
    base: Path, *, snapshotter: str | None = None, startup_timeout: float = 60.0
) -> Iterator[CriRuntime]:
    """Start containerd under ``base`` with a ready pod and container; tear it all down on exit.

    Raises :class:`RuntimeUnavailable` when this machine cannot run it (not root, tools missing,
    containerd or runc failing); the message says why, with containerd's log tail.
    """
    if os.geteuid() != 0:
        raise RuntimeUnavailable("containerd with runc needs root")
    missing = missing_tools()
    if missing:
        raise RuntimeUnavailable(f"missing: {', '.join(missing)}")
    base = base.resolve()
    socket_dir = base
    short_dir: str | None = None
    if len(str(base / "containerd.sock.ttrpc")) > _MAX_SOCKET_PATH:
        short_dir = tempfile.mkdtemp(prefix="kx-cri-")
        socket_dir = Path(short_dir)
    layout = Layout(base=base, socket_dir=socket_dir)
    for directory in (layout.root, layout.state, layout.runc_root, layout.logs):
        directory.mkdir(parents=True, exist_ok=True)
    stream_port = free_loopback_port()
    layout.config.write_text(
        containerd_config(
            layout,
            stream_port=stream_port,
            snapshotter=snapshotter or default_snapshotter(),
            sandbox_image=IMAGE_NAME,
        )
    )
    cgroup_parent = f"kuber-exec-test-{uuid.uuid4().hex[:12]}"
    run_dir_existed = _SHIM_SOCKET_DIR.parent.exists()
    process: subprocess.Popen[bytes] | None = None
    client: CriClient | None = None
    try:
        process = _start_containerd(layout)
        client = CriClient(layout.socket)
        version = _wait_ready(layout, process, client, stream_port, startup_timeout)
        _import_image(layout, client, snapshotter or default_snapshotter())
        pod_uid = str(uuid.uuid4())
        pod_logs = layout.logs / pod_uid
        pod_logs.mkdir()
        sandbox_config = pod_sandbox_config(
            name="kuber-exec-runtime",
            uid=pod_uid,
            namespace="default",
            log_directory=pod_logs,
            cgroup_parent="/" + cgroup_parent,
        )
        try:
            sandbox_id = client.run_pod_sandbox(sandbox_config)
            container_id = client.create_container(
                sandbox_id,
                container_config(
                    name="shell", image=IMAGE_NAME, argv=SLEEP_FOREVER, log_path="shell.log"
                ),
                sandbox_config,
            )
            client.start_container(container_id)
        except grpc.RpcError as exc:
            raise RuntimeUnavailable(
                f"CRI could not run the pod: {exc}\ncontainerd log:\n{_tail(layout.containerd_log)}"
            ) from exc
        _poll(
            lambda: client is not None and client.container_state(container_id) == 1,
            timeout=30,
            interval=0.05,
            what="the container to be running",
        )
        yield CriRuntime(
            layout,
            process=process,
            client=client,
            stream_port=stream_port,
            version=version,
            sandbox_id=sandbox_id,
            container_id=container_id,
        )
    finally:
        _teardown(layout, process, client, cgroup_parent, run_dir_existed)
        if short_dir is not None:
            shutil.rmtree(short_dir, ignore_errors=True)


def _wait_ready(
    layout: Layout,
    process: subprocess.Popen[bytes],
    client: CriClient,
    stream_port: int,
    timeout: float,
) -> RuntimeVersion:
    versions: list[RuntimeVersion] = []

    def cri_answers() -> bool:
        if process.poll() is not None:
            raise RuntimeUnavailable(
                f"containerd exited with {process.returncode}:\n{_tail(layout.containerd_log)}"
            )
        if not layout.socket.exists():
            return False
        try:
            versions.append(client.version(timeout=2.0))
        except grpc.RpcError:
            return False
        return True

    def stream_server_listens() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", stream_port), timeout=1.0):
                return True
        except OSError:
            return False

    try:
        _poll(cri_answers, timeout=timeout, interval=0.05, what="containerd's CRI Version")
        _poll(stream_server_listens, timeout=timeout, interval=0.05, what="the stream server")
    except RuntimeUnavailable as exc:
        raise RuntimeUnavailable(f"{exc}\ncontainerd log:\n{_tail(layout.containerd_log)}") from exc
    return versions[-1]


def _import_image(layout: Layout, client: CriClient, snapshotter: str) -> None:
    archive = layout.base / "kuber-busybox.oci.tar"
    build_oci_archive(archive)
    ctr = shutil.which("ctr") or "ctr"
    done = _run_tool(
        [
            ctr,
            "--address",
            str(layout.socket),
            "--namespace",
            CRI_NAMESPACE,
            "images",
            "import",
            "--snapshotter",
            snapshotter,
            str(archive),
        ],
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeUnavailable(f"ctr images import failed: {done.stdout}{done.stderr}")
    # The CRI plugin learns about images from containerd's events: wait until it sees this one.
    _poll(
        lambda: client.image_present(IMAGE_NAME),
        timeout=30,
        interval=0.05,
        what=f"the CRI plugin to see {IMAGE_NAME}",
    )


def _teardown(
    layout: Layout,
    process: subprocess.Popen[bytes] | None,
    client: CriClient | None,
    cgroup_parent: str,
    run_dir_existed: bool,
) -> None:
    """Undo everything, in order, each step best effort; raise at the end if something leaked."""
    problems: list[str] = []
    # Shims are started by containerd, then re-parented to PID 1: remember them to wait for them.
    shims = _pids_with_arg(str(layout.socket))
    if client is not None and process is not None and process.poll() is None:
        problems += _remove_pods(client)
    if client is not None:
        client.close()
    if process is not None:
        try:
            _stop_process(process)
        except subprocess.TimeoutExpired:
            problems.append(f"containerd pid {process.pid} did not exit")
    # Anything the CRI could not remove: containers first (runc), then their shims (by pid).
    runc = shutil.which("runc")
    runc_ns_root = layout.runc_root / CRI_NAMESPACE
    leftover_ids: set[str] = set()
    if runc is not None and runc_ns_root.is_dir():
        listed = _run_tool([runc, "--root", str(runc_ns_root), "list", "-q"], timeout=30)
        for container in listed.stdout.split():
            _run_tool([runc, "--root", str(runc_ns_root), "delete", "--force", container])
            leftover_ids.add(container)
            problems.append(f"runc container {container} was left over (force-deleted)")
    for pid, argv in _processes_with_arg(str(layout.socket)).items():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if "-id" in argv[:-1]:
            leftover_ids.add(argv[argv.index("-id") + 1])
        problems.append(f"process {pid} ({' '.join(argv[:1])}) was left over (killed)")
    for shim_id in leftover_ids:
        with contextlib.suppress(OSError):
            _shim_socket(layout.socket, shim_id).unlink()
    problems += unmount_all_under(layout.base)
    remove_cgroups(cgroup_parent)
    # Exited shims linger as zombies until PID 1 reaps them: give it a moment (not an error).
    with contextlib.suppress(RuntimeUnavailable):
        _poll(
            lambda: not any(Path(f"/proc/{pid}").exists() for pid in shims),
            timeout=5,
            interval=0.05,
            what="the shims to be reaped",
        )
    # The shims put their sockets in /run/containerd/s whatever the state dir: tidy up if empty.
    if not run_dir_existed:
        for directory in (_SHIM_SOCKET_DIR, _SHIM_SOCKET_DIR.parent):
            with contextlib.suppress(OSError):
                directory.rmdir()
    if problems:
        # Cleanup happened; say loudly that the runtime did not clean up after itself.
        raise RuntimeError("CRI runtime teardown: " + "; ".join(problems))


def _remove_pods(client: CriClient) -> list[str]:
    problems: list[str] = []
    try:
        containers = client.list_container_ids()
        sandboxes = client.list_sandbox_ids()
    except grpc.RpcError as exc:
        return [f"CRI list failed: {exc}"]
    for container in containers:
        try:
            client.stop_container(container)
            client.remove_container(container)
        except grpc.RpcError as exc:
            problems.append(f"removing container {container}: {exc}")
    for sandbox in sandboxes:
        try:
            client.stop_pod_sandbox(sandbox)
            client.remove_pod_sandbox(sandbox)
        except grpc.RpcError as exc:
            problems.append(f"removing sandbox {sandbox}: {exc}")
    return problems
