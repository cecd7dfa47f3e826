"""Seed 000 (multi-stream inside a captured graph), ported by renaming the imports.

The model is the seed's, verbatim apart from ``torchair``/``tng`` -> ``npu_compile``,
``.npu()``/``device="npu"`` -> the available device, and 1000x1000 -> 64x64 for CPU speed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import npu_compile as tng
import npu_mempool
import npu_streams
import pytest
import torch
from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.core.utils import logger

N = 64

# Every example runs with both graphs the CPU emulation can replay (see conftest.cpu_replay).


def _make_model(device: torch.device) -> torch.nn.Module:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # Two events tagged "66" and "77".
            self.tagged_event1 = tng.ops.npu_create_tagged_event(tag="66")
            self.tagged_event2 = tng.ops.npu_create_tagged_event(tag="77")

        def forward(
            self, in1: torch.Tensor, in2: torch.Tensor, in3: torch.Tensor, in4: torch.Tensor
        ) -> tuple[torch.Tensor, ...]:
            add_result = torch.add(in1, in2)
            tng.ops.npu_tagged_event_record(self.tagged_event1)
            with tng.scope.npu_stream_switch("1"):
                # mm waits for the add on the main stream.
                tng.ops.npu_tagged_event_wait(self.tagged_event1)
                mm_result = torch.mm(in3, in4)
                tng.ops.npu_tagged_event_record(self.tagged_event2)
                B = in3 + in4
                # B is used on stream "1": keep its memory alive until that stream is done.
                tng.ops.npu_record_tagged_stream(B, "1")
                mm1 = torch.mm(in3, in4)
                del B
            C = torch.ones(N, N, dtype=torch.float16, device=device)
            C.add_(2)
            with tng.scope.npu_stream_switch("2"):
                tng.ops.npu_tagged_event_wait(self.tagged_event2)
                add2 = torch.add(in3, in4)
            return add_result, mm_result, mm1, add2, C

    return Model()


def _inputs(device: torch.device) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(N, N, dtype=torch.float16).to(device) for _ in range(4)]


def test_seed_000_example_matches_eager_and_is_captured(
    device: torch.device,
    monkeypatch: pytest.MonkeyPatch,
    warmup_calls: Callable[[torch.device], int],
    graph_counts: Callable[[Sequence[object], int], dict[str, int]],
) -> None:
    prepared: list[torch.fx.GraphModule] = []
    real_pass = npu_streams.prepare_for_capture

    def spy(gm: torch.fx.GraphModule, device: torch.device | None = None) -> torch.fx.GraphModule:
        out = real_pass(gm, device)
        prepared.append(out)
        return out

    monkeypatch.setattr(npu_streams, "prepare_for_capture", spy)
    logger.info("seed 000 on %s", device)

    model = _make_model(device)
    in1, in2, in3, in4 = _inputs(device)
    expected = model(in1, in2, in3, in4)

    config = CompilerConfig()
    config.mode = "reduce-overhead"
    npu_backend = tng.get_npu_backend(compiler_config=config)
    compiled = torch.compile(model, backend=npu_backend, dynamic=False, fullgraph=True)
    # One graph key, three calls: captured after the device's warm-up calls, then replayed.
    counts = graph_counts(["step"] * 3, warmup_calls(device))
    with npu_mempool.counters.expect(**counts):
        for _ in range(3):
            result = compiled(in1, in2, in3, in4)
            for got, want in zip(result, expected, strict=True):
                torch.testing.assert_close(got, want)
            del result, got  # a held output would send the next call to a second call path

    # The stream pass ran on the AOT graph: side-stream ops are labelled with their tags.
    (gm,) = prepared
    labels = {node.meta.get(npu_streams.STREAM_META_KEY) for node in gm.graph.nodes}
    assert {"1", "2"} <= labels
    mm_tags = [
        node.meta.get(npu_streams.STREAM_META_KEY)
        for node in gm.graph.nodes
        if node.target is torch.ops.aten.mm.default
    ]
    assert mm_tags == ["1", "1"]
    assert npu_backend.stats.fallbacks == []


def test_seed_000_run_eagerly_gives_the_same_numbers(device: torch.device) -> None:
    model = _make_model(device)
    inputs = _inputs(device)
    expected = model(*inputs)
    config = CompilerConfig()
    config.debug.run_eagerly = True
    compiled = torch.compile(
        model, backend=tng.get_npu_backend(compiler_config=config), fullgraph=True
    )
    with npu_mempool.counters.expect(captures=0):
        result = compiled(*inputs)
    for got, want in zip(result, expected, strict=True):
        torch.testing.assert_close(got, want)
