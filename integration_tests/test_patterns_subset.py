"""The patterns sweep's CI subset: five patterns through the sweep's own code, with npu_compile.

``nox -s patterns`` runs every pattern of ``benchmarks/_patterns.py`` with npu_compile and
``aot_eager`` (``docs/patterns.md``), torchao's, peft's and diffusers' among them. CI runs the
cheap ones that need nothing beyond transformers: a train step compiled with its backward and
AdamW step inside, compiled autograd, a channels_last ResNet in inference, a float32 region
inside bfloat16 autocast, and DDP with an MLP on two gloo processes (Dynamo's DDPOptimizer
splits its graph at four buckets). Each must equal eager (dtypes included), fall back nowhere,
be captured whole and replay what it captured.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _patterns import PATTERNS, run

SUBSET = [
    "train_step",
    "compiled_autograd",
    "channels_last_inference",
    "autocast_region",
    "ddp_mlp",
]


@pytest.mark.parametrize("name", SUBSET)
def test_the_pattern_equals_eager_captured_whole_and_replayed(name: str) -> None:
    outcome = run(PATTERNS[name], "npu_compile")
    assert outcome.result == "pass", outcome
    assert outcome.worst is not None  # something was compared
    assert outcome.whole, outcome.graphs
    assert outcome.replays["replays"] > 0, outcome.replays
    # Once the loop is warm, every call replays: none captures again, none runs eagerly.
    assert outcome.steady is not None
    assert outcome.steady["calls"] > 0
    assert outcome.steady["replays"] == outcome.steady["calls"], outcome.steady
    if PATTERNS[name].world > 1:
        assert outcome.ranks == PATTERNS[name].world
        assert outcome.dynamo.get("ddp_buckets", 0) >= 2, outcome.dynamo


def test_a_pattern_whose_library_is_absent_is_skipped_naming_it() -> None:
    pattern = dataclasses.replace(PATTERNS["lora"], needs=("peft", "no_such_library"))
    outcome = run(pattern, "npu_compile")
    assert outcome.result == "skipped"
    assert "no_such_library" in outcome.detail
