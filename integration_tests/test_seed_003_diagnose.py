"""Seed 003 (host scheduling): is a decode step Host Bound or Device Bound, and what changes?"""

from __future__ import annotations

import npu_compile
import npu_mempool
import torch
from npu_compile.tools import DemoConfig, TinyDecoder


def test_seed_003_diagnose_a_decode_step(device: torch.device) -> None:
    model = TinyDecoder(DemoConfig(layers=2, dim=64)).to(device).eval()
    token = model.prompt()[:, :1].contiguous()
    position = torch.full((1,), 8, dtype=torch.long, device=device)
    with npu_mempool.counters.expect(captures=1):
        # A bound of ±100 % settles on the busiest machine: this checks the verdict's rule.
        report = npu_compile.diagnose(
            model, token, position, steps=5, warmup=2, tolerance=1.0, max_seconds=30
        )
    assert report.verdict in {"Host Bound", "Device Bound"}
    assert report.compiled is not None
    assert report.eager.host_ms > 0
    assert report.compiled.host_ms > 0
    assert report.separable is (device.type != "cpu")
    text = str(report)
    assert report.verdict in text
    assert "reduce-overhead" in text
