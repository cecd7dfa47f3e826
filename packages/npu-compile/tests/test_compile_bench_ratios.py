"""`npu-compile bench`: the decode step's ratios of npu_compile to each other variant."""

from __future__ import annotations

import pytest
import torch
from npu_compile._tools import bench as _bench
from npu_compile._tools.bench import BenchRow

RATIOS = ("npu_compile / eager", "npu_compile / cudagraphs", "npu_compile / reduce-overhead")


def _rows(**changes: BenchRow) -> list[BenchRow]:
    rows = {
        "eager": BenchRow("eager", 400.0, matches_eager=True, cudagraph_skips=0),
        "npu_compile reduce-overhead": BenchRow(
            "npu_compile reduce-overhead", 100.0, matches_eager=True, cudagraph_skips=0
        ),
        "torch cudagraphs": BenchRow("torch cudagraphs", 125.0, matches_eager=True),
        "torch mode=reduce-overhead": BenchRow(
            "torch mode=reduce-overhead", 80.0, matches_eager=True, cudagraph_skips=2
        ),
    }
    rows.update(changes)
    return list(rows.values())


def test_each_ratio_is_npu_compile_time_over_the_others() -> None:
    ratios = _bench._ratios(_rows())
    assert list(ratios) == list(RATIOS)
    assert [ratios[name]["ratio"] for name in RATIOS] == [0.25, 0.8, 1.25]
    assert all(ratios[name]["matches_eager"] is True for name in RATIOS)
    # The other variant's CUDA-graph skips travel with the ratio: its time is no replay's then.
    assert ratios["npu_compile / reduce-overhead"]["cudagraph_skips"] == 2


def test_a_ratio_to_a_variant_that_differs_from_eager_says_so() -> None:
    differs = BenchRow("torch cudagraphs", 50.0, "DIFFERS from eager", matches_eager=False)
    ratios = _bench._ratios(_rows(**{"torch cudagraphs": differs}))
    assert ratios["npu_compile / cudagraphs"]["ratio"] == 2.0
    assert ratios["npu_compile / cudagraphs"]["matches_eager"] is False
    assert ratios["npu_compile / eager"]["matches_eager"] is True


@pytest.mark.parametrize("missing", ["torch mode=reduce-overhead", "npu_compile reduce-overhead"])
def test_a_variant_without_a_time_gives_no_ratio_and_says_why(missing: str) -> None:
    failed = BenchRow(missing, None, "failed: RuntimeError: no")
    ratios = _bench._ratios(_rows(**{missing: failed}))
    entry = ratios["npu_compile / reduce-overhead"]
    assert entry["ratio"] is None
    assert entry["matches_eager"] is None
    assert entry["note"] == f"{missing}: failed: RuntimeError: no"


def test_the_decode_bench_on_cpu_reports_the_ratios_it_can() -> None:
    from npu_compile._tools.demo_model import DemoConfig

    report = _bench.decode_step_bench(
        torch.device("cpu"), steps=1, config=DemoConfig(layers=1, dim=32)
    )
    eager, ours = report.rows[:2]
    assert eager.us_per_call is not None
    assert ours.us_per_call is not None
    ratios = report.to_json()["extra"]["ratios"]
    assert ratios["npu_compile / eager"] == {
        "over": "eager",
        "ratio": round(ours.us_per_call / eager.us_per_call, 3),
        "matches_eager": True,
        "cudagraph_skips": 0,
    }
    for name in RATIOS[1:]:  # torch's CUDA-graph variants need CUDA
        assert ratios[name]["ratio"] is None
        assert "needs CUDA" in ratios[name]["note"]
    assert "npu_compile / cudagraphs: - (not checked)" in report.table()
