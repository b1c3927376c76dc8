"""The commands a copy runs in the container, and how their output is read.

Every copy is one or more ordinary execs of ``sh -c SCRIPT sh ARG...``: the scripts are fixed text
and every path travels as an argument, never spliced into the script, so no name can be interpreted
by the shell. They need a POSIX ``sh`` and what busybox has (``cat``, ``head -c``, ``tail -c +N``,
``tee``, ``wc``, ``dd``; ``stat`` where there is one, else ``wc -c`` sizes a file); ``tar`` only for
directories and ``sha256sum`` only to compare checksums. ``LC_ALL=C`` keeps the tools' error
messages in English, so that :func:`problem_of` can tell "no space left" from "permission denied".

The checksum of a tree is taken of the tar stream itself, in the same pass: ``tee /dev/fd/N`` hands
a copy of the stream to ``sha256sum`` (or ``wc -c`` without it), so the archive is read once (a
download's stream then leaves in whole 64 KiB blocks where ``dd`` can gather them), and the summary
comes back as ``kx-sum=<value>`` on stderr, with ``kx-tar=<status>``. A file's checksum is taken of
the file itself: beside the download (a second read, from the page cache), or of an upload's chunks
as each is written, while the next one arrives (what was written, read back). Both avoid ``tee`` on
the file's path, whose small buffered writes cost more than the checksum (a 100 MB download took
three times as long through it).
"""

from __future__ import annotations

import posixpath
import re

import attrs

from ._problems import CopyError, CopyProblem

__all__ = [
    "Probe",
    "Summary",
    "UPLOAD_CHUNK_MIB",
    "download_file_command",
    "download_tree_command",
    "first_line",
    "parse_probe",
    "parse_summary",
    "probe_command",
    "problem_of",
    "remote_parent",
    "upload_file_command",
    "upload_tree_command",
]

# A file's size comes from stat where there is one: busybox's `wc -c` reads the whole file
# (0.4 s for 100 MB), and the probe runs before every copy.
_PROBE = """export LC_ALL=C
p=$1
if [ -d "$p" ]; then k=dir; elif [ -f "$p" ]; then k=file
elif [ -e "$p" ] || [ -L "$p" ]; then k=other; else k=missing; fi
if [ -d "$2" ]; then q=dir; elif [ -e "$2" ]; then q=other; else q=missing; fi
t=0; command -v tar >/dev/null 2>&1 && t=1
s=0; command -v sha256sum >/dev/null 2>&1 && s=1
r=0; [ -r "$p" ] && r=1
w=0; [ -w "$p" ] && w=1
n=-1; if [ "$k" = file ] && [ "$r" = 1 ]; then
  n=$(stat -c %s -- "$p" 2>/dev/null) || n=$(wc -c < "$p"); fi
echo "kind=$k parent=$q tar=$t sha256sum=$s readable=$r writable=$w size=$((n))"
"""

# $1 the file, $2 its size, $3 its mode. The redirection fails before anything is read when
# the file cannot be created. The upload is delimited by its size (v4 cannot close stdin): by
# `dd iflag=count_bytes` where dd has it (GNU, busybox 1.33+), which reads 64 KiB at a time,
# else by `head -c`, whose small reads make it the slowest link of a large upload. dd's own
# statistics are dropped from its messages, its errors kept (`no space left` names the
# problem). The sha256 is taken of the file as written, read back from the page cache: a check
# of what the container holds, not only of what went through the pipe. With dd, the file is
# written in chunks of CHUNK MiB and each chunk's index goes down a pipe once it is written, so
# the summer reads it back while the next one arrives (busybox's sha256sum costs about 0.45 s
# per 100 MB, which then overlaps the transfer instead of following it). Without dd, the file is
# read back once it is whole.
_UPLOAD_FILE = """export LC_ALL=C
f=$1 size=$2 mode=$3
exec 5>"$f" || exit 3
s=0; command -v sha256sum >/dev/null 2>&1 && s=1
put() {
  n=$size k=0
  while [ "$n" -gt 0 ]; do
    c=$(( n < CHUNK * 1048576 ? n : CHUNK * 1048576 ))
    said=$(dd bs=65536 iflag=fullblock,count_bytes count="$c" 2>&1 >&5 5>&-) || {
      printf '%s\\n' "$said" | grep -v -e ' records ' -e ' copied' >&2; return 3; }
    echo "$k"; k=$((k + 1)); n=$((n - c))
  done
}
summed() { sha256sum | { read h _; echo "kx-sum=$h" >&2; }; }
if ! dd if=/dev/null of=/dev/null iflag=fullblock,count_bytes count=0 2>/dev/null; then
  head -c "$size" >&5 5>&- || exit 3
  exec 5>&-
  [ "$s" = 1 ] && summed < "$f"
elif [ "$s" = 1 ]; then
  st=$( { { put; echo $? >&6; } | { while read k; do
      dd if="$f" bs=1048576 skip=$((k * CHUNK)) count=CHUNK 2>/dev/null; done | summed; } 5>&-
    } 6>&1 )
  exec 5>&-
  [ "$st" = 0 ] || exit 3
else
  put >/dev/null || exit 3
  exec 5>&-
fi
[ -n "$mode" ] && chmod "$mode" "$f"
n=$(stat -c %s -- "$f" 2>/dev/null) || n=$(wc -c < "$f")
echo "kx-size=$((n))" >&2
"""

#: The upload's chunk, in MiB: the summer reads a chunk back while the next one is written, so
#: what it reads after the last byte arrived is at most one chunk (about 35 ms with busybox),
#: and each chunk costs two short-lived dd processes.
UPLOAD_CHUNK_MIB = 8

# $1 the directory to extract into (made if missing), $2 the archive's size. The archive goes
# through tee to the summer in the same pass (see the module's description).
_UPLOAD_TREE = """export LC_ALL=C
[ -d "$1" ] || mkdir -- "$1" || exit 3
st=$( { { head -c "$2" | tee /dev/fd/5 | tar xf - -C "$1" >&2; echo $? >&6; } 5>&1 \
  | SUMMER | { read h _; echo "kx-sum=$h"; } >&2; } 6>&1 )
echo "kx-tar=$st" >&2
[ "$st" = 0 ]
"""

# $1 the directory. The stream is on stdout (fd 4, kept aside), its summary on stderr. tee
# hands the stream on in tar's small writes, and the kubelet sends each read of the pipe as a
# message of its own (about 6,000 for 10,000 small files): where dd can gather whole blocks
# (`iflag=fullblock`: GNU, busybox), the stream leaves in 64 KiB blocks instead, which took a
# tree of 10,000 files from 0.53-0.80 s to 0.36-0.43 s through kubectl exec.
_DOWNLOAD_TREE = """export LC_ALL=C
cd -- "$1" || exit 3
exec 4>&1
if dd if=/dev/null of=/dev/null bs=65536 iflag=fullblock 2>/dev/null; then
  blocks() { dd bs=65536 iflag=fullblock 2>/dev/null; }
else
  blocks() { cat; }
fi
st=$( { { { tar cf - . 4>&- 5>&-; echo $? >&6; } | tee /dev/fd/5 | blocks >&4 5>&-; } 5>&1 \
  | SUMMER | { read h _; echo "kx-sum=$h"; } >&2; } 6>&1 )
echo "kx-tar=$st" >&2
[ "$st" = 0 ]
"""

# $1 the file, $2 the first byte to send (1-based: tail -c +N, which resumes a download). The
# summer reads the whole file beside the transfer, in the background: the bytes are read
# twice from the page cache instead of once through `tee`, whose small writes made the stream
# several times slower than the file. The receiver checks the whole file it then has (a file
# rewritten during the copy fails the check instead of arriving torn).
_DOWNLOAD_FILE = """export LC_ALL=C
if command -v sha256sum >/dev/null 2>&1; then
  { sha256sum < "$1" | { read h _; echo "kx-sum=$h" >&2; }; } &
fi
if [ "$2" = 1 ]; then cat -- "$1"; else tail -c +"$2" -- "$1"; fi
st=$?
wait
[ "$st" = 0 ] || exit 3
"""

_SUMMERS = {True: "sha256sum", False: "wc -c"}


def _sh(script: str, *arguments: str) -> tuple[str, ...]:
    return ("sh", "-c", script, "sh", *arguments)


def probe_command(path: str) -> tuple[str, ...]:
    """What ``path`` is, and what tools the container has: one line of ``key=value``."""
    return _sh(_PROBE, path, remote_parent(path))


def upload_file_command(path: str, size: int, mode: int | None) -> tuple[str, ...]:
    """Write the next ``size`` bytes of stdin to ``path`` (then ``chmod`` it to ``mode``); with
    ``sha256sum`` in the container, ``kx-sum`` is the sha256 of the file as written, each
    :data:`UPLOAD_CHUNK_MIB` chunk read back while the next one arrives (where dd has
    ``count_bytes``; else once the file is whole), and ``kx-size`` its size."""
    script = _UPLOAD_FILE.replace("CHUNK", str(UPLOAD_CHUNK_MIB))
    return _sh(script, path, str(size), "" if mode is None else f"{mode & 0o777:o}")


def upload_tree_command(directory: str, size: int, *, sha256: bool) -> tuple[str, ...]:
    """Extract the next ``size`` bytes of stdin, a tar archive, into ``directory``."""
    return _sh(_UPLOAD_TREE.replace("SUMMER", _SUMMERS[sha256]), directory, str(size))


def download_tree_command(directory: str, *, sha256: bool) -> tuple[str, ...]:
    """``tar c`` of ``directory``'s contents on stdout."""
    return _sh(_DOWNLOAD_TREE.replace("SUMMER", _SUMMERS[sha256]), directory)


def download_file_command(path: str, offset: int) -> tuple[str, ...]:
    """``path``'s bytes from ``offset`` (0-based) on stdout."""
    return _sh(_DOWNLOAD_FILE, path, str(offset + 1))


def remote_parent(path: str) -> str:
    """The directory ``path`` is in, as the container's shell would find it."""
    stripped = path.rstrip("/") or "/"
    parent = posixpath.dirname(stripped)
    return parent or "."


@attrs.frozen(kw_only=True)
class Probe:
    """What the probe found: the path's kind (``dir``, ``file``, ``other``, ``missing``), its
    parent's (``dir``, ``other``, ``missing``), the tools, the access, a file's size."""

    kind: str
    parent: str
    tar: bool
    sha256sum: bool
    readable: bool
    writable: bool
    size: int


_PROBE_LINE = re.compile(
    r"kind=(dir|file|other|missing) parent=(dir|other|missing) tar=([01]) sha256sum=([01]) "
    r"readable=([01]) writable=([01]) size=(-?[0-9]+)"
)


def parse_probe(stdout: bytes, path: str) -> Probe:
    """The probe's line, or a ``REMOTE_FAILED`` error when the container did not print one."""
    match = _PROBE_LINE.search(stdout.decode("utf-8", "replace"))
    if match is None:
        raise CopyError(
            CopyProblem.REMOTE_FAILED,
            f"could not inspect {path!r} in the container (it needs a POSIX sh)",
        )
    kind, parent, tar, sha, readable, writable, size = match.groups()
    return Probe(
        kind=kind,
        parent=parent,
        tar=tar == "1",
        sha256sum=sha == "1",
        readable=readable == "1",
        writable=writable == "1",
        size=int(size),
    )


@attrs.frozen(kw_only=True)
class Summary:
    """What a transfer script reported on stderr: ``kx-sum`` (a sha256 in hex, or a byte
    count when the container has no ``sha256sum``), ``kx-size``, ``kx-tar``; and the rest of
    its stderr, the tools' own messages."""

    checksum: str | None
    size: int | None
    tar_status: int | None
    messages: str


_KEYS = re.compile(rb"^kx-(sum|size|tar)=(.*)$", re.MULTILINE)


def parse_summary(stderr: bytes) -> Summary:
    """Split a transfer's stderr into its ``kx-`` lines and the tools' messages."""
    found: dict[bytes, str] = {}
    for key, value in _KEYS.findall(stderr):
        found[key] = value.decode("ascii", "replace").strip()
    messages = _KEYS.sub(b"", stderr).decode("utf-8", "replace").strip()
    size = found.get(b"size")
    status = found.get(b"tar")
    return Summary(
        checksum=found.get(b"sum") or None,
        size=int(size) if size and size.isdigit() else None,
        tar_status=int(status) if status and status.isdigit() else None,
        messages=messages,
    )


#: The tools' messages (with LC_ALL=C) and the problem each one means, first match wins.
_MESSAGES = (
    ("No space left on device", CopyProblem.NO_SPACE),
    ("Disk quota exceeded", CopyProblem.NO_SPACE),
    ("Permission denied", CopyProblem.PERMISSION_DENIED),
    ("Read-only file system", CopyProblem.PERMISSION_DENIED),
    ("Operation not permitted", CopyProblem.PERMISSION_DENIED),
    ("Not a directory", CopyProblem.NOT_A_DIRECTORY),
    ("Is a directory", CopyProblem.IS_A_DIRECTORY),
    ("No such file or directory", CopyProblem.NO_SUCH_PATH),
    ("can't cd", CopyProblem.NO_SUCH_PATH),
)


def problem_of(messages: str) -> CopyProblem:
    """The problem a failed transfer's stderr names (``REMOTE_FAILED`` if none)."""
    for text, problem in _MESSAGES:
        if text in messages:
            return problem
    return CopyProblem.REMOTE_FAILED


def first_line(messages: str, limit: int = 300) -> str:
    """The first non-empty line of the tools' messages, bounded, for an error's message."""
    for line in messages.splitlines():
        if line.strip():
            return line.strip()[:limit]
    return "no message"
