"""``torch.compile(DDP(model))`` on two gloo processes over loopback, equal to eager DDP.

DDP's gradient buckets make Dynamo's DDPOptimizer split the graph, one AOT compile per bucket,
and pair each bucket's forward with its backward by torch's ``counters["aot_autograd"]``. A
backend that did not keep torch's contract crashed in the backward: an HF Llama with "expected
same # of fw and bw compiles, but found bucket -1". Each run (``_ddp_train.py``) trains three
AdamW steps on each rank's own data, eagerly then compiled; rank 0's parameters must be the
same both ways.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

SCRIPT = Path(__file__).with_name("_ddp_train.py")


def _run(kind: str, backend: str, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), kind, backend, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = torch.load(out)
    return result


# The MLP of 512-wide layers runs in the patterns subset (test_patterns_subset: ddp_mlp).
def test_compiled_ddp_with_several_buckets_equals_eager_ddp(tmp_path: Path) -> None:
    result = _run("llama", "npu_compile", tmp_path / "ddp.pt")
    for p, q in zip(result["compiled"], result["eager"], strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    stats = result["stats"]
    # DDPOptimizer split the graph at bucket boundaries, and every piece was captured.
    assert stats["fx_graphs"] >= 2, stats
    assert stats["fallbacks"] == 0, stats
    assert stats["captured"] == stats["fx_graphs"], stats
