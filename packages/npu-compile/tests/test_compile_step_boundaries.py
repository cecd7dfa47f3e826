"""Step boundaries through ``torch.compile``: the ``out = model(x)`` loop needs one pool."""

from __future__ import annotations

from collections.abc import Callable

import npu_compile
import pytest
import torch
from npu_compile import get_npu_backend
from npu_mempool import StaleOutputError


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))


@pytest.mark.parametrize(
    "mark",
    [npu_compile.mark_step_begin, torch.compiler.cudagraph_mark_step_begin],
    ids=["npu_compile", "torch"],
)
def test_the_out_equals_f_x_loop_uses_one_graph_with_a_step_boundary(
    mark: Callable[[], None],
) -> None:
    model = _model()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    inputs = [torch.randn(4, 16) for _ in range(5)]
    with torch.no_grad():
        out = None
        for x in inputs:
            mark()
            out = compiled(x)  # the previous `out` is still referenced here
            torch.testing.assert_close(out, model(x))
        assert out is not None
    (runner,) = backend.stats.runners
    assert runner.num_graphs == 1
    assert runner.counters.replays == len(inputs) - 1
    assert runner.counters.recapture_reasons == {}


def test_without_a_boundary_the_loop_takes_a_second_pool_and_stays_right() -> None:
    model = _model()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        held = [(compiled(x), model(x)) for x in (torch.randn(4, 16) for _ in range(3))]
    for got, expected in held:
        torch.testing.assert_close(got, expected)
    (runner,) = backend.stats.runners
    assert runner.counters.recapture_reasons["outputs_in_use"] >= 1


def test_an_output_kept_across_a_boundary_raises_when_read() -> None:
    compiled = torch.compile(_model(), backend=get_npu_backend())
    with torch.no_grad():
        first = compiled(torch.randn(4, 16))
        npu_compile.mark_step_begin()
        compiled(torch.randn(4, 16))
    with pytest.raises(StaleOutputError, match="step boundary"):
        first.sum()
