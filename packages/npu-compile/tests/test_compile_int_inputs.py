"""Python ints that change every call: passed to the graph as device scalars where they decide no
shape (one capture for every value), left as part of the graph key where they do."""

from __future__ import annotations

import operator

import pytest
import torch
from npu_compile import get_npu_backend


class _Cache:
    """A position counter kept as a Python int, as Gemma's sliding-window cache keeps one."""

    def __init__(self) -> None:
        self.seen = 0


class _Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, cache: _Cache) -> torch.Tensor:
        positions = torch.arange(x.shape[0]) + cache.seen
        offset = max(cache.seen - 3 + 1, 0)
        mask = (positions[:, None] - offset) <= positions[None, :]
        cache.seen = cache.seen + 1
        return self.lin(x) * mask.float().sum(1, keepdim=True) + positions[:, None]


def _eager_and_compiled(steps: int) -> tuple[list[torch.Tensor], list[torch.Tensor], object]:
    torch.manual_seed(0)
    eager_model, compiled_model = _Counter().eval(), _Counter().eval()
    compiled_model.load_state_dict(eager_model.state_dict())
    backend = get_npu_backend()
    compiled = torch.compile(compiled_model, backend=backend)
    xs = [torch.randn(4, 8) for _ in range(steps)]
    eager_cache, compiled_cache = _Cache(), _Cache()
    with torch.no_grad():
        expected = [eager_model(x, eager_cache) for x in xs]
        got = [compiled(x, compiled_cache).clone() for x in xs]
    return expected, got, backend


def test_an_int_counter_is_one_graph_for_every_value() -> None:
    expected, got, backend = _eager_and_compiled(12)
    for want, have in zip(expected, got, strict=True):
        torch.testing.assert_close(have, want)
    runners = backend.stats.runners  # type: ignore[attr-defined]
    captures = sum(r.counters.captures for r in runners)
    replays = sum(r.counters.replays for r in runners)
    assert replays >= 8, (captures, replays)
    assert captures <= 3


def _graph_with_int(uses: str) -> tuple[torch.fx.GraphModule, list[object]]:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    s = env.create_unbacked_symint()
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(3, device="meta")
    n = graph.placeholder("n")
    n.meta["val"] = s
    if uses == "arithmetic":
        plus = graph.call_function(operator.add, (n, 2))
        out = graph.call_function(torch.ops.aten.mul.Tensor, (x, plus))
        out.meta["val"] = torch.empty(3, device="meta")
        graph.output((out, plus))
    else:  # the int decides a shape
        out = graph.call_function(torch.ops.aten.new_zeros.default, (x, [n]))
        graph.output((out,))
    return torch.fx.GraphModule(torch.nn.Module(), graph), [torch.empty(3), s]


def test_arithmetic_and_scalar_operands_are_rewritten() -> None:
    from npu_compile._tensorify import tensorify_int_inputs

    gm, inputs = _graph_with_int("arithmetic")
    result = tensorify_int_inputs(gm, inputs)
    assert result is not None
    assert result.inputs == (1,)
    assert result.outputs == (1,)
    call = result.wrap(gm.forward, torch.device("cpu"))
    out, plus = call(torch.ones(3), 5)
    assert plus == 7
    assert isinstance(plus, int)
    torch.testing.assert_close(out, torch.full((3,), 7.0))


def test_an_int_that_decides_a_shape_is_left_alone() -> None:
    from npu_compile._tensorify import tensorify_int_inputs

    gm, inputs = _graph_with_int("shape")
    before = gm.code
    assert tensorify_int_inputs(gm, inputs) is None
    assert gm.code == before


@pytest.mark.parametrize("steps", [6])
def test_an_int_that_decides_a_shape_still_matches_eager(steps: int) -> None:
    def fn(x: torch.Tensor, n: int) -> torch.Tensor:
        return x.new_ones(n).sum() * x

    backend = get_npu_backend()
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    with torch.no_grad():
        for n in range(2, 2 + steps):
            x = torch.randn(3)
            torch.testing.assert_close(compiled(x, n), fn(x, n))
