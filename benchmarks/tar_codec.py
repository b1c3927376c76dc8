"""The sans-IO tar codec's speed, side by side with Python's ``tarfile``, as ratios.

    python benchmarks/tar_codec.py            # 200 MB in 64 KiB pieces, 3 rounds
    python benchmarks/tar_codec.py --quick    # a smoke run (20 MB, one round)

Two archives, built in memory before any clock starts: one file of ``--size-mb`` MB (the shape of
a large download), and a tree of ``--files`` files of 1 KiB (the shape of a source tree). For
each, four measurements, interleaved round by round so that a noisy neighbour slows each alike:

- **reader**: ``TarReader`` fed the archive as ``--piece-kib`` pieces (as WebSocket messages
  arrive), every event pulled and each data view's length counted; and again with each view
  copied to ``bytes`` (the least a file write costs), since ``tarfile`` returns copies.
- **tarfile read**: ``tarfile.open(mode="r|")`` over the same bytes (streaming mode, as over a
  pipe), each member's data read in pieces of the same size.
- **writer**: ``TarWriter`` producing the archive from pieces of the same size (headers, data
  passed through, padding), the bytes counted by a sink.
- **tarfile write**: ``tarfile.open(mode="w|")`` writing the same members into a counting sink.

Rates are MB/s of archive bytes (medians); ratios are ours over ``tarfile``'s. The reader's peak
Python allocation while it reads the large archive (``tracemalloc``, measured in a separate pass)
shows that it buffers no file. Writes the figures as JSON (``--json``; default
``results/tar_codec.json``).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tarfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kuber_exec_core import NEED_DATA
from kuber_exec_core.tar import ArchiveEnd, MemberData, TarReader, TarWriter

RESULTS = Path(__file__).resolve().parent / "results"
MB = 1_000_000


class CountingSink(io.RawIOBase):
    """A file-like object that keeps only the number of bytes written to it."""

    def __init__(self) -> None:
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        length = memoryview(data).nbytes
        self.count += length
        return length


class RepeatingReader(io.RawIOBase):
    """``size`` bytes of one repeated block, read in whatever pieces are asked for."""

    def __init__(self, block: bytes, size: int) -> None:
        self._block = block
        self._left = size

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > len(self._block):
            size = len(self._block)
        size = min(size, self._left)
        self._left -= size
        return self._block[:size]


# A member: its name and size.
Members = list[tuple[str, int]]


def large_file(size: int) -> Members:
    return [("data/large.bin", size)]


def tree(files: int) -> Members:
    return [(f"tree/d{index // 100:03d}/f{index:05d}.txt", 1024) for index in range(files)]


def build_archive(members: Members, piece: bytes) -> bytes:
    """The archive ``TarWriter`` writes for ``members`` (what both readers then read)."""
    out = bytearray()
    writer = TarWriter()
    for name, size in members:
        out += writer.add_file(name, size, mtime=1_700_000_000)
        left = size
        while left:
            count = min(left, len(piece))
            out += writer.write_data(piece[:count])
            left -= count
        out += writer.end_file()
    out += writer.finish()
    return bytes(out)


def run_reader(pieces: list[bytes], copy: bool = False) -> int:
    reader = TarReader()
    feed = iter(pieces)
    data = 0
    while True:
        event = reader.next_event()
        if event is NEED_DATA:
            piece = next(feed, None)
            if piece is None:
                reader.end_of_input()
            else:
                reader.feed(piece)
        elif isinstance(event, MemberData):
            # ``copy``: what a file write costs at least (the view's bytes copied once).
            data += len(bytes(event.data)) if copy else len(event.data)
        elif isinstance(event, ArchiveEnd):
            return data


def run_tarfile_read(raw: bytes, piece_size: int) -> int:
    data = 0
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r|", bufsize=piece_size) as archive:
        for info in archive:
            stream = archive.extractfile(info)
            if stream is None:
                continue
            while chunk := stream.read(piece_size):
                data += len(chunk)
    return data


def run_writer(members: Members, piece: bytes) -> int:
    sink = CountingSink()
    writer = TarWriter()
    view = memoryview(piece)
    for name, size in members:
        sink.write(writer.add_file(name, size, mtime=1_700_000_000))
        left = size
        while left:
            count = min(left, len(view))
            sink.write(writer.write_data(view[:count]))
            left -= count
        sink.write(writer.end_file())
    sink.write(writer.finish())
    return sink.count


def run_tarfile_write(members: Members, piece: bytes) -> int:
    sink = CountingSink()
    with tarfile.open(
        fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT, bufsize=len(piece)
    ) as out:
        for name, size in members:
            info = tarfile.TarInfo(name)
            info.size = size
            info.mtime = 1_700_000_000
            out.addfile(info, RepeatingReader(piece, size))
    return sink.count


def timed(call: Callable[[], int]) -> tuple[float, int]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def reader_peak_bytes(pieces: list[bytes]) -> int:
    """The largest Python allocation above the baseline while the reader reads the archive."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]
        run_reader(pieces)
        return tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()


def chunks(raw: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(raw), size):
        yield raw[start : start + size]


def measure(label: str, members: Members, piece_size: int, repeat: int) -> dict[str, Any]:
    piece = bytes(range(256)) * (piece_size // 256)
    raw = build_archive(members, piece)
    pieces = list(chunks(raw, piece_size))
    data = sum(size for _, size in members)
    runs: dict[str, Callable[[], int]] = {
        "reader": lambda: run_reader(pieces),
        "reader, data copied": lambda: run_reader(pieces, copy=True),
        "tarfile read": lambda: run_tarfile_read(raw, piece_size),
        "writer": lambda: run_writer(members, piece),
        "tarfile write": lambda: run_tarfile_write(members, piece),
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, call in runs.items():
            elapsed, result = timed(call)
            expected = data if "read" in name else None
            if expected is not None and result != expected:
                raise RuntimeError(f"{name} read {result} bytes of data, not {expected}")
            seconds[name].append(elapsed)
    rates = {name: len(raw) / MB / statistics.median(times) for name, times in seconds.items()}
    return {
        "archive": label,
        "archive_bytes": len(raw),
        "members": len(members),
        "piece_bytes": piece_size,
        "rates_mb_s": rates,
        "read_ratio": rates["reader"] / rates["tarfile read"],
        "read_copied_ratio": rates["reader, data copied"] / rates["tarfile read"],
        "write_ratio": rates["writer"] / rates["tarfile write"],
        "reader_peak_alloc_bytes": reader_peak_bytes(pieces) if len(members) == 1 else None,
    }


def print_table(results: list[dict[str, Any]]) -> None:
    print(f"{'archive':<28}{'reader':>10}{'tarfile':>10}{'ratio':>8}"
          f"{'writer':>10}{'tarfile':>10}{'ratio':>8}   (MB/s of archive)")  # fmt: skip
    print("-" * 92)
    for row in results:
        rates = row["rates_mb_s"]
        print(
            f"{row['archive']:<28}{rates['reader']:>10.0f}{rates['tarfile read']:>10.0f}"
            f"{row['read_ratio']:>7.2f}x{rates['writer']:>10.0f}{rates['tarfile write']:>10.0f}"
            f"{row['write_ratio']:>7.2f}x"
        )
    for row in results:
        rate = row["rates_mb_s"]["reader, data copied"]
        print(
            f"reader with each data view copied ({row['archive']}): {rate:.0f} MB/s, "
            f"{row['read_copied_ratio']:.2f}x tarfile"
        )
    for row in results:
        if row["reader_peak_alloc_bytes"] is not None:
            print(
                f"reader's peak allocation reading {row['archive']}: "
                f"{row['reader_peak_alloc_bytes'] / 1024:.1f} KiB"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200, help="the large file's size")
    parser.add_argument("--files", type=int, default=10_000, help="files in the tree")
    parser.add_argument("--piece-kib", type=int, default=64, help="the pieces' size")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--quick", action="store_true", help="20 MB, 1,000 files, one round")
    parser.add_argument("--json", type=Path, help="where to write the results")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.files, args.repeat = 20, 1000, 1
    piece_size = args.piece_kib * 1024
    started = time.time()
    results = [
        measure(
            f"one {args.size_mb} MB file", large_file(args.size_mb * MB), piece_size, args.repeat
        ),
        measure(f"{args.files:,} files of 1 KiB", tree(args.files), piece_size, args.repeat),
    ]
    print_table(results)
    path: Path = args.json or RESULTS / ("tar_codec-quick.json" if args.quick else "tar_codec.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "started": started,
        "python": sys.version.split()[0],
        "repeat": args.repeat,
        "results": results,
    }
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
