"""torch's backend contract: what torch's own layers expect of a backend that runs AOT autograd.

Each test is a pattern torch's documentation teaches, compared with eager and, where torch's
bookkeeping is the point, with ``backend="aot_eager"`` (built on torch's own helper, so it keeps
the contract by construction): a train step with ``backward()`` inside, compiled autograd, an
``autocast(enabled=False)`` region, inputs that are slices, and the AOT counters DDPOptimizer
reads. DDP itself, on two processes, is in ``integration_tests/test_integ_ddp.py``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator
from typing import Any

import npu_compile
import pytest
import torch
from torch._dynamo.utils import counters

# Dynamo itself reads ``loss.grad`` when it resumes after ``backward()`` (aot_eager warns too).
pytestmark = pytest.mark.filterwarnings(
    "ignore:The .grad attribute of a Tensor that is not a leaf Tensor:UserWarning"
)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))


def _train_step(model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


def _graphs_traced(backend: Any, run: Callable[[Any], None]) -> int:
    torch._dynamo.reset()
    counters.clear()
    run(backend)
    return int(counters["stats"]["unique_graphs"])


def test_a_train_step_with_backward_inside_equals_eager_on_every_step() -> None:
    # Used to fail on the second call: the backward ran under Dynamo's frame hook, which traced
    # the backward compiler and our runtime ("'<=' not supported between 'dict' and 'set'").
    compiled_model, eager_model = _mlp(), _mlp()
    backend = npu_compile.get_npu_backend()
    step = torch.compile(_train_step(compiled_model), backend=backend)
    reference = _train_step(eager_model)
    for i in range(4):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(step(x), reference(x), rtol=0, atol=0)
        for p, q in zip(compiled_model.parameters(), eager_model.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert backend.stats.fallback_reasons == {}


def test_a_capturable_adamw_step_compiled_with_backward_matches_eager() -> None:
    # AdamW(capturable=True) keeps its step counts as tensors and adds to them with one foreach
    # op, as a captured optimizer step on a device needs. The CPU refuses capturable eagerly, so
    # the reference is the same optimizer without it (the same arithmetic).
    def make(capturable: bool) -> tuple[torch.nn.Module, Any]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=capturable)

        def step(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            loss = torch.nn.functional.mse_loss(model(x), target)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            optimizer.zero_grad()
            return loss

        return model, step

    reference, reference_step = make(capturable=False)
    model, step = make(capturable=True)
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(step, backend=backend)
    for index in range(3):
        generator = torch.Generator().manual_seed(index)
        x, target = torch.randn(4, 8, generator=generator), torch.randn(4, 2, generator=generator)
        torch.testing.assert_close(compiled(x, target), reference_step(x, target))
        torch.testing.assert_close(list(model.parameters()), list(reference.parameters()))
    assert backend.stats.fallbacks == []


def test_a_train_step_traces_no_graph_of_the_backend_itself() -> None:
    # As many Dynamo graphs as aot_eager: the backward compiler and the backward it returns are
    # not traced (torch's Note [Wrapping bw_compiler in disable]).
    def run(backend: Any) -> None:
        step = torch.compile(_train_step(_mlp()), backend=backend)
        for _ in range(3):
            step(torch.randn(3, 4))

    assert _graphs_traced(npu_compile.get_npu_backend(), run) == _graphs_traced("aot_eager", run)


@torch._dynamo.config.patch(compiled_autograd=True)
def test_compiled_autograd_captures_the_backward_and_equals_eager() -> None:
    # Compiled autograd passes its backward graph's inputs as one list; it used to fall back
    # (aot_trace_failed: "all flat_args must be KNOWN_TYPES").
    compiled_model, eager_model = _mlp(), _mlp()
    backend = npu_compile.get_npu_backend()

    def train(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().sum()
        loss.backward()
        return loss

    step = torch.compile(train, backend=backend)
    for i in range(3):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(step(compiled_model, x), train(eager_model, x))
        for p, q in zip(compiled_model.parameters(), eager_model.parameters(), strict=True):
            assert p.grad is not None
            assert q.grad is not None
            torch.testing.assert_close(p.grad, q.grad)
    assert backend.stats.fallback_reasons == {}
    assert backend.stats.captured >= 2  # the forward and compiled autograd's backward


def _float32_region(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", enabled=False):
        z = x.float() @ y.float()
    return z * 1.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_an_autocast_disabled_region_keeps_float32(dtype: torch.dtype) -> None:
    # The graph holds autocast's casts; AOT's wrapper turns autocast off around it (disable_amp).
    # Skipping that wrapper applied autocast a second time: bfloat16 where eager gives float32.
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    compiled = torch.compile(_float32_region, backend=npu_compile.get_npu_backend())
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        expected = _float32_region(x, y)
        for _ in range(2):
            got = compiled(x, y)
            assert got.dtype == expected.dtype == torch.float32
            torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_an_autocast_model_equals_eager_under_autocast() -> None:
    model = _mlp().eval()
    compiled = torch.compile(model, backend=npu_compile.get_npu_backend())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for i in range(3):
            x = torch.randn(3, 4, generator=torch.Generator().manual_seed(i))
            expected = model(x)
            got = compiled(x)
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got, expected, rtol=0, atol=0)


def _windows(x: torch.Tensor) -> torch.Tensor:
    s0, s1 = x.stride()
    return x.as_strided((2, 3, 4), (s0, 2 * s1, s1)).sum(-1)


def test_a_sliced_input_keeps_its_strides_in_the_capture() -> None:
    # Static buffers used to be dense while Dynamo traced the caller's strides into as_strided:
    # off by a third of the scale on the first call.
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(_windows, backend=backend)
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(4, 16, generator=torch.Generator().manual_seed(i))[:, 2:10]
            torch.testing.assert_close(compiled(x), _windows(x), rtol=0, atol=0)
    assert (backend.stats.captured, backend.stats.fallback_reasons) == (1, {})


def _gaps(x: torch.Tensor) -> torch.Tensor:
    return x.as_strided((3, 16), (16, 1)).sum(-1)  # the 8 elements between rows too


def _fixed_offset(x: torch.Tensor) -> torch.Tensor:
    return x.as_strided((2, 4), (16, 1), 0).sum(-1)  # before the slice's first element


@pytest.mark.parametrize("fn", [_gaps, _fixed_offset])
def test_a_read_outside_a_sliced_input_runs_eagerly_with_its_reason(
    fn: Callable[[torch.Tensor], torch.Tensor], caplog: pytest.LogCaptureFixture
) -> None:
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(fn, backend=backend)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="npu_compile"):
        for i in range(2):
            x = torch.randn(5, 16, generator=torch.Generator().manual_seed(i))[:, 2:10]
            torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0)
    assert set(backend.stats.fallback_reasons.values()) == {npu_compile.FallbackReason.STORAGE_READ}
    [record] = [r for r in caplog.records if "storage_read" in r.getMessage()]
    assert "as_strided" in record.getMessage()


def _rolling(x: torch.Tensor) -> torch.Tensor:
    n, d = x.shape
    return x.as_strided((n - 3, 4, d), (d, d, 1)).sum(-1)  # windows of 4 rows, every row once


def _one_row_past(x: torch.Tensor) -> torch.Tensor:
    n, d = x.shape
    return x.as_strided((n - 2, 4, d), (d, d, 1)).sum(-1)  # the last window ends past x


def test_windows_over_a_dense_input_are_proven_inside_it_for_every_size() -> None:
    # Longformer's chunks: traced for symbolic sizes, the read was refused as unprovable and the
    # graph ran eagerly under autocast. Over a dense input it is provably inside at every size.
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(_rolling, backend=backend, dynamic=True)
    with torch.no_grad():
        for n in (8, 12, 16, 12):
            x = torch.randn(n, 3, generator=torch.Generator().manual_seed(n))
            torch.testing.assert_close(compiled(x), _rolling(x), rtol=0, atol=0)
    assert (backend.stats.captured, backend.stats.fallback_reasons) == (1, {})


@pytest.mark.parametrize(
    ("fn", "sliced"), [(_one_row_past, False), (_rolling, True)], ids=["past_the_end", "sliced"]
)
def test_a_symbolic_read_not_proven_inside_runs_eagerly(
    fn: Callable[[torch.Tensor], torch.Tensor], sliced: bool
) -> None:
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    with torch.no_grad():
        for n in (8, 12, 16):
            # Past the end of x's elements lies more of its storage: eager reads it.
            whole = torch.randn(n + 4, 6, generator=torch.Generator().manual_seed(n))
            x = whole[:n, :3] if sliced else whole.view(-1)[: n * 3].view(n, 3)
            torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0)
    assert set(backend.stats.fallback_reasons.values()) == {npu_compile.FallbackReason.STORAGE_READ}


def test_each_aot_compile_is_counted_as_torch_counts_it() -> None:
    # DDPOptimizer pairs each bucket's forward with its backward by this count: without it, a
    # DDP model's backward raised "expected same # of fw and bw compiles, but found bucket -1".
    def run(backend: Any) -> None:
        compiled = torch.compile(copy.deepcopy(_mlp()), backend=backend)
        compiled(torch.randn(3, 4)).sum().backward()

    def counted(backend: Any) -> dict[str, int]:
        _graphs_traced(backend, run)
        return dict(counters["aot_autograd"])

    assert counted(npu_compile.get_npu_backend()) == counted("aot_eager")
    assert counted(npu_compile.get_npu_backend())["ok"] == 1


def test_the_backend_says_how_its_calls_were_answered() -> None:
    backend = npu_compile.get_npu_backend()
    model = _mlp().eval()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(4):
            compiled(torch.randn(3, 4))
        compiled(torch.randn(5, 4))  # a new shape: Dynamo recompiles, a new graph
    calls = backend.stats.calls()
    assert calls["calls"] == 5
    assert calls["captures"] + calls["replays"] + calls["eager_calls"] == 5
    assert calls["replays"] == 3
    (row,) = [r for r in calls["runners"].values() if r["calls"] == 4]
    assert (row["captures"], row["replays"], row["capture_reasons"]) == (1, 3, {})


def test_without_dynamo_s_guards_calls_replay_and_another_layout_is_refused() -> None:
    # An engine that dispatches itself turns Dynamo's guards off (vLLM does): no guard runs per
    # call. The runner keys each call on its inputs, so a replay never serves another layout,
    # and a new layout is refused, since the graph was traced for one. Before, a (1, 16) input
    # was broadcast into the (4, 16) static buffer and four rows came back.
    model = _mlp().eval()
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(
        model, backend=backend, options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe}
    )
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(4, 4, generator=torch.Generator().manual_seed(i))
            torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)
        (runner,) = backend.stats.runners
        assert (runner.counters.captures, runner.counters.replays) == (1, 2)
        with pytest.raises(npu_compile.BackendError, match=r"traced for input \d+ as float32"):
            compiled(torch.randn(1, 4))
