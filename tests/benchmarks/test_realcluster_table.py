"""scripts/realcluster/bench.py's throughput table, without a cluster: each peer's row shows
that peer's own median, and the ratio is the best of kuber-exec's rows over it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
MB = 1_000_000


def load_bench() -> ModuleType:
    path = REPO / "scripts" / "realcluster" / "bench.py"
    spec = importlib.util.spec_from_file_location("realcluster_bench", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("realcluster_bench", module)
    spec.loader.exec_module(module)
    return module


BENCH = load_bench()
OURS_KEYS = [(r, k) for r in ("trio", "asyncio") for k in ("execute", "interactive")]
rates = st.floats(min_value=1 * MB, max_value=2_000 * MB, allow_nan=False)


@given(
    ours=st.lists(rates, min_size=4, max_size=4),
    theirs=st.lists(st.one_of(st.none(), rates), min_size=3, max_size=3),
)
def test_each_peer_row_is_its_own_median_against_our_best(
    ours: list[float], theirs: list[float | None]
) -> None:
    peers = ("official-aio", "kr8s", "lightkube")
    measured = {(peer, "throughput"): rate for peer, rate in zip(peers, theirs, strict=True)}
    lines, rows = BENCH.throughput_table(
        dict(zip(OURS_KEYS, ours, strict=True)), measured, peers, 100 * MB
    )
    assert len(lines) == 1 + 4 + len(peers)
    best = max(ours)
    for peer, rate, row, line in zip(peers, theirs, rows[4:], lines[5:], strict=True):
        assert row["client"].startswith(peer)
        if rate is None:
            assert row["mb_s"] is None
            assert line.split()[-2:] == ["-", "-"]
        else:
            assert row["mb_s"] == rate / MB
            assert row["best_ours_over_this"] == best / rate
            assert line.split()[-2] == f"{rate / MB:.1f}"


def test_a_peer_given_less_than_the_full_size_says_so() -> None:
    ours = dict.fromkeys(OURS_KEYS, 80.0 * MB)
    _, rows = BENCH.throughput_table(
        ours, {("official", "throughput"): 10.0 * MB}, ("official",), 100 * MB
    )
    assert rows[-1]["client"] == "official (pod known, 10 MB)"
    assert rows[-1]["best_ours_over_this"] == 8.0
