"""Capture sizes: batches padded up to a listed size, graphs = listed sizes, one pool."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import npu_compile
import pytest
import torch
from npu_compile import CompilerConfig, get_npu_backend

SERVING_LOOP = (1, 4, 2, 8, 3, 1)


@pytest.fixture(autouse=True)
def no_size_one_specialisation() -> Iterator[None]:
    # Dynamo specialises a size of 1 unless told not to; serving engines (vLLM) ask the same.
    import torch.fx.experimental._config as fx_config

    with fx_config.patch(backed_size_oblivious=True):
        yield


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))


def _compiled(
    model: torch.nn.Module, sizes: list[int] | None
) -> tuple[torch.nn.Module, npu_compile.NpuBackend]:
    config = CompilerConfig()
    config.aclgraph_config.capture_sizes = sizes
    backend = get_npu_backend(compiler_config=config)
    return torch.compile(model, backend=backend, dynamic=True), backend


def test_a_serving_loop_replays_one_graph_per_listed_size() -> None:
    model = _mlp()
    compiled, backend = _compiled(model, [1, 2, 4, 8])
    with torch.no_grad():
        for batch in SERVING_LOOP:
            npu_compile.mark_step_begin()  # the previous step's output may be overwritten
            x = torch.randn(batch, 64)
            got = compiled(x)
            assert got.shape == (batch, 64)
            torch.testing.assert_close(got, model(x))
    (runner,) = backend.stats.runners
    assert runner.num_graphs == 4
    assert runner.counters.captures == 4
    assert backend.stats.fallbacks == []
    # Largest first into one pool: about the largest size's memory, not the sum.
    largest, largest_backend = _compiled(model, [8])
    with torch.no_grad():
        largest(torch.randn(8, 64))
    (alone,) = largest_backend.stats.runners
    assert runner.counters.pool_bytes <= 1.25 * alone.counters.pool_bytes


def test_a_size_is_captured_by_the_first_call_that_needs_it() -> None:
    model = _mlp()
    compiled, backend = _compiled(model, [2, 4, 8])
    with torch.no_grad():
        for batch, graphs in ((3, 1), (7, 2), (4, 2), (1, 3)):
            npu_compile.mark_step_begin()
            x = torch.randn(batch, 64)
            torch.testing.assert_close(compiled(x), model(x))
            (runner,) = backend.stats.runners
            assert runner.num_graphs == graphs  # nothing is captured ahead of traffic


def test_a_larger_batch_runs_eagerly_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    model = _mlp()
    compiled, backend = _compiled(model, [2, 4])
    with caplog.at_level(logging.INFO, logger="npu_compile"), torch.no_grad():
        for _ in range(3):
            x = torch.randn(6, 64)
            torch.testing.assert_close(compiled(x), model(x))
    lines = [r.getMessage() for r in caplog.records if "larger than the largest" in r.getMessage()]
    assert len(lines) == 1
    assert "batch size 6" in lines[0]
    (runner,) = backend.stats.runners
    assert runner.num_graphs == 0  # no listed size was needed, so none was captured


class _Centred(torch.nn.Module):
    """Subtracts the batch mean: row ``i`` depends on every other row."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x)
        return h - h.mean(dim=0, keepdim=True)


def test_a_reduction_over_the_batch_is_captured_per_size(caplog: pytest.LogCaptureFixture) -> None:
    model = _Centred()
    compiled, backend = _compiled(model, [2, 4])
    with caplog.at_level(logging.INFO, logger="npu_compile"), torch.no_grad():
        for batch in (3, 3, 2):
            npu_compile.mark_step_begin()
            x = torch.randn(batch, 8)
            torch.testing.assert_close(compiled(x), model(x))
    lines = [r.getMessage() for r in caplog.records if "captured per batch size" in r.getMessage()]
    assert len(lines) == 1
    assert "aten.mean.dim" in lines[0]
    (runner,) = backend.stats.runners
    assert runner.num_graphs == 2  # batches 3 and 2, each at its own size


def test_strict_refuses_a_graph_it_cannot_pad() -> None:
    config = CompilerConfig()
    config.aclgraph_config.capture_sizes = [2, 4]
    config.debug.aclgraph.strict = True
    compiled = torch.compile(_Centred(), backend=get_npu_backend(compiler_config=config))
    x = torch.randn(3, 8)
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.raises(Exception, match="works along the batch dimension") as info, torch.no_grad():
        compiled(x)
    error = getattr(info.value, "inner_exception", info.value)
    assert isinstance(error, npu_compile.ConfigError)


def test_a_static_graph_is_captured_as_before() -> None:
    model = _mlp()
    config = CompilerConfig()
    config.aclgraph_config.capture_sizes = [4, 8]
    backend = get_npu_backend(compiler_config=config)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad():
        x = torch.randn(3, 64)
        torch.testing.assert_close(compiled(x), model(x))
    (runner,) = backend.stats.runners
    assert runner.num_graphs == 1


def test_capture_sizes_are_validated() -> None:
    config = CompilerConfig()
    for wrong in ([], [0, 2], [2, "4"], 8):
        with pytest.raises(npu_compile.ConfigError, match="capture_sizes"):
            config.aclgraph_config.capture_sizes = wrong
    config.aclgraph_config.capture_sizes = [8, 1, 4, 4]
    assert config.aclgraph_config.capture_sizes == (1, 4, 8)
    for wrong in (-1, True, 1.0, "0"):
        with pytest.raises(npu_compile.ConfigError, match="capture_sizes_dim"):
            config.aclgraph_config.capture_sizes_dim = wrong
    config.aclgraph_config.capture_sizes_dim = 1
    assert config.aclgraph_config.capture_sizes_dim == 1


def test_a_padded_hf_decoder_equals_eager() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    compile_config = CompilerConfig()
    compile_config.aclgraph_config.capture_sizes = [1, 2, 4, 8]
    backend = get_npu_backend(compiler_config=compile_config)
    # Only the batch is dynamic, as a serving engine marks it (the sequence length is fixed).
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for batch in SERVING_LOOP:
            npu_compile.mark_step_begin()
            ids = torch.randint(0, 64, (batch, 5))
            torch._dynamo.mark_dynamic(ids, 0)
            got = compiled(input_ids=ids).logits
            torch.testing.assert_close(got, model(input_ids=ids).logits, rtol=1e-4, atol=1e-4)
    assert backend.stats.fallbacks == []
    runners = backend.stats.runners
    assert sum(runner.num_graphs for runner in runners) == 4 * len(runners)


_SAVED = textwrap.dedent(
    """
    import json, sys
    import torch
    import npu_compile
    from npu_compile.backend import loaded_stats

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.proj(x).relu()

    phase, path = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model = Model().eval()
    config = npu_compile.CompilerConfig()
    config.aclgraph_config.capture_sizes = [2, 4]
    backend = npu_compile.get_npu_backend(compiler_config=config)
    with torch.no_grad():
        if phase == "save":
            x = torch.randn(3, 8)
            torch._dynamo.mark_dynamic(x, 0)
            with torch._dynamo.config.patch(enable_aot_compile=True):
                compiled = torch.compile(model.forward, backend=backend, fullgraph=True)
                fn = compiled.aot_compile(((x,), {}))
        else:
            with open(path, "rb") as f:
                fn = torch.compiler.load_compiled_function(f, f_globals=Model.forward.__globals__)
        same = True
        for batch in (3, 2, 4, 3):
            npu_compile.mark_step_begin()
            x = torch.randn(batch, 8)
            same = same and torch.allclose(fn(model, x), model(x))
    if phase == "save":
        fn.save_compiled_function(path)
    runners = backend.stats.runners if phase == "save" else loaded_stats.runners
    print(json.dumps({"same": bool(same), "graphs": [r.num_graphs for r in runners]}))
    """
)


def test_a_saved_graph_pads_as_the_process_that_compiled_it(tmp_path: Path) -> None:
    # torch's AOT compile (vLLM's compile cache) loads the graph without tracing: the plan made
    # when it was compiled travels with it.
    script, artifact = tmp_path / "saved.py", tmp_path / "model.aot"
    script.write_text(_SAVED)
    for phase in ("save", "load"):
        done = subprocess.run(
            [sys.executable, str(script), phase, str(artifact)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result == {"same": True, "graphs": [2]}, phase  # 3 and 4 share the graph of 4


def test_padding_fills_the_rows_it_adds_with_the_first_real_row() -> None:
    from npu_compile._padding.padded import Padding

    padding = Padding(
        sizes=(4, 8),
        largest=8,
        tensor_dims=((0, 1), (2, 0)),
        int_args=(1,),
        outputs=(),
        symbol="s0",
    )
    wide = torch.arange(24.0).reshape(2, 3, 4).transpose(0, 2)  # (4, 3, 2), batch in dim 1
    ints = torch.arange(3, dtype=torch.int64)
    made = []
    for _ in range(2):  # each call pads afresh: nothing is shared between callers
        grown, size, short = padding.pad([wide, 3, ints], 8)
        made.append(grown)
        assert size == 8
        assert grown.shape == (4, 8, 2)
        assert short.shape == (8,)
        assert short.dtype == torch.int64
        torch.testing.assert_close(grown[:, :3], wide)
        torch.testing.assert_close(grown[:, 3:], wide[:, :1].expand(4, 5, 2))
        assert short.tolist() == [0, 1, 2, 0, 0, 0, 0, 0]
        assert grown.is_contiguous()  # dense, whatever the caller's layout
    assert made[0].data_ptr() != made[1].data_ptr()
    # More missing rows than the concatenation takes as inputs: the first row is expanded.
    many = Padding(
        sizes=(16,), largest=16, tensor_dims=((0, 0),), int_args=(), outputs=(), symbol="s0"
    )
    rows = torch.arange(6.0).reshape(3, 2)
    (tall,) = many.pad([rows], 16)
    assert tall.shape == (16, 2)
    assert tall.is_contiguous()
    torch.testing.assert_close(tall[:3], rows)
    torch.testing.assert_close(tall[3:], rows[:1].expand(13, 2))
    nothing = padding.pad([torch.ones(4, 0, 2), 0, torch.ones(0)], 4)
    assert nothing[0].shape == (4, 4, 2)
    assert not nothing[0].any()
    assert nothing[2].shape == (4,)
    assert not nothing[2].any()


def test_padding_picks_each_batchs_size_and_cuts_the_outputs_it_was_given() -> None:
    from npu_compile._padding.padded import Padding
    from npu_compile._padding.proof import BatchInt, SliceRows

    padding = Padding(
        sizes=(2, 4, 8),  # 16 is listed too, but these guards admit only up to 8
        largest=16,
        tensor_dims=((0, 0),),
        int_args=(),
        outputs=(SliceRows(0), SliceRows(0), BatchInt(2, 1), None, SliceRows(1), SliceRows(0)),
        symbol="s0",
    )
    assert [padding.target(b) for b in (0, 1, 2, 3, 5, 8, 9, 16, 17)] == [
        2, 2, 2, 4, 8, 8, 9, 16, None  # 9..16: no admitted size covers them, run as they are
    ]  # fmt: skip
    rows = torch.arange(32.0).reshape(8, 4)
    wide = torch.arange(48.0).reshape(3, 16)  # batch in dim 1, two entries per row
    empty = torch.empty(8, 0)  # no storage: the runner's own static tensor
    outputs = (rows, rows, 17, "as is", wide, empty)
    cut = padding.cut(outputs, 3, 8)
    assert cut[0] is rows
    assert cut[1] is rows
    assert rows.shape == (3, 4)
    torch.testing.assert_close(rows, torch.arange(12.0).reshape(3, 4))
    assert cut[2] == 7  # 2 * 3 + 1, recomputed for the real batch
    assert cut[3] == "as is"
    assert cut[4] is wide
    assert wide.shape == (3, 6)
    torch.testing.assert_close(wide, torch.arange(48.0).reshape(3, 16)[:, :6])
    assert cut[5] is not empty
    assert cut[5].shape == (3, 0)
    assert empty.shape == (8, 0)
    assert isinstance(cut, tuple)
    # Nothing to recompute or replace: the very sequence comes back, as a list or a tensor.
    plain = Padding(
        sizes=(4,), largest=4, tensor_dims=((0, 0),), int_args=(), outputs=(SliceRows(0),),
        symbol="s0",
    )  # fmt: skip
    listed = [torch.ones(4, 2)]
    assert plain.cut(listed, 1, 4) is listed
    assert listed[0].shape == (1, 2)
    alone = torch.ones(4, 2)
    assert plain.cut(alone, 3, 4) is alone
    assert alone.shape == (3, 2)
