"""Reinplacing of intermediates: in place only where nothing can tell the difference.

Each case traces a small function to an ATen graph with fake tensors (what AOT autograd hands
the backend), runs the pass, and checks both which ops now write in place and that the graph
still computes what the function does.
"""

from __future__ import annotations

from collections.abc import Callable

import npu_compile
import pytest
import torch
from npu_compile._passes.reinplace import reinplace_intermediates
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten


def _reinplaced(fn: Callable[..., object], *args: torch.Tensor) -> tuple[set[str], object]:
    """The in-place ops the pass wrote, and the graph's result on ``args``."""
    gm = make_fx(fn, tracing_mode="fake")(*args)
    reinplace_intermediates(gm.graph)
    gm.recompile()
    inplace = {
        str(node.target)
        for node in gm.graph.nodes
        if node.op == "call_function" and str(node.target).split(".")[-2].endswith("_")
    }
    return inplace, gm(*args)


def test_a_chain_of_dead_intermediates_is_written_in_place() -> None:
    def chain(x: torch.Tensor) -> torch.Tensor:
        return ((x * 3) + 1).sigmoid()

    x = torch.randn(4, 5)
    inplace, got = _reinplaced(chain, x)
    assert inplace == {"aten.add_.Tensor", "aten.sigmoid_.default"}
    torch.testing.assert_close(got, chain(x))


def test_overlapping_operands_are_not_written_in_place() -> None:
    # Hugging Face's position ids from a packed mask: two overlapping slices of one tensor.
    def differences(x: torch.Tensor) -> torch.Tensor:
        c = torch.cat([x[:, :1] - 1, x], dim=-1)
        return (c[:, 1:] - c[:, :-1]).ne(1).cumsum(-1)

    x = torch.arange(14).reshape(2, 7)
    inplace, got = _reinplaced(differences, x)
    assert "aten.sub_.Tensor" not in inplace
    torch.testing.assert_close(got, differences(x))


def test_memory_read_later_through_a_view_is_not_written() -> None:
    def later_view(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        view = y[0]
        z = y.add(1)  # `y` is read afterwards through `view`
        return z, view * 3

    x = torch.randn(3, 4)
    inplace, got = _reinplaced(later_view, x)
    assert "aten.add_.Tensor" not in inplace
    torch.testing.assert_close(got, later_view(x))


def test_an_intermediate_the_graph_returns_is_not_written() -> None:
    def returned(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        return y, y.relu()

    x = torch.randn(6)
    inplace, got = _reinplaced(returned, x)
    assert inplace == set()
    torch.testing.assert_close(got, returned(x))


def test_graph_inputs_are_never_scratch() -> None:
    def on_input(x: torch.Tensor) -> torch.Tensor:
        return x.add(1).relu()

    x = torch.randn(5)
    before = x.clone()
    inplace, got = _reinplaced(on_input, x)
    assert "aten.add_.Tensor" not in inplace  # x is the caller's
    torch.testing.assert_close(x, before)
    torch.testing.assert_close(got, on_input(x))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, y: (x * 1).add(y),  # broadcast: the result is larger than `x * 1`
        lambda x, y: (x > 0).to(torch.int64).add(y),  # type promotion to float
        lambda x, y: (x * 1).t().add(y.t()).t(),  # strides of a transposed view
    ],
    ids=["broadcast", "promotion", "strides"],
)
def test_results_that_do_not_fit_the_operand_stay_out_of_place(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    x, y = torch.randn(1, 4), torch.randn(3, 4)
    if fn(x, y).shape == x.shape:
        x = torch.randn(3, 4)
    inplace, got = _reinplaced(fn, x, y)
    assert "aten.add_.Tensor" not in inplace
    torch.testing.assert_close(got, fn(x, y))


def test_random_ops_are_not_written_in_place() -> None:
    def noisy(x: torch.Tensor) -> torch.Tensor:
        return torch.bernoulli(x.sigmoid())

    inplace, _ = _reinplaced(noisy, torch.randn(8))
    assert not any("bernoulli" in op for op in inplace)


def test_the_backend_gives_eager_numbers_on_overlapping_slices() -> None:
    def positions(mask: torch.Tensor) -> torch.Tensor:
        c = torch.cat([mask[:, :1] - 1, mask], dim=-1)
        return (c[:, 1:] - c[:, :-1]).ne(1).cumsum(-1) * 1.0

    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(positions, backend=backend)
    with torch.no_grad():
        for length in (7, 5, 9):
            mask = torch.arange(2 * length).reshape(2, length)
            torch.testing.assert_close(compiled(mask), positions(mask))
    assert backend.stats.captured >= 1


def test_a_foreach_update_written_back_into_its_inputs_can_still_be_read() -> None:
    # Inductor's pass makes `_foreach_add` copied back into the inputs a `_foreach_add_`, which
    # returns nothing, and left the graph indexing its result: every call failed.
    def count(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        torch._foreach_add_([a, b], 1)
        return a * 2 + b

    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(count, backend=backend)
    mine, theirs = [torch.zeros(4), torch.ones(4)], [torch.zeros(4), torch.ones(4)]
    for _ in range(3):  # the capture and two replays
        torch.testing.assert_close(compiled(*mine), count(*theirs))
        torch.testing.assert_close(mine, theirs)
    assert backend.stats.captured == 1
    assert backend.stats.fallbacks == []


def test_the_cpu_replay_runs_the_graph_a_device_captures() -> None:
    # The CPU emulation used to replay Dynamo's graph, which hid every pass of the backend (and
    # the wrong numbers one of them gave) from CPU tests. The ops a replay runs must be those of
    # the graph after the passes: here the reinplaced `add_` and `relu_`.
    def chain(x: torch.Tensor) -> torch.Tensor:
        return ((x * 3) + 1).relu()

    compiled = torch.compile(chain, backend=npu_compile.get_npu_backend())
    x = torch.randn(4)
    with torch.no_grad():
        compiled(x)  # the capture
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = compiled(x)  # a replay
    torch.testing.assert_close(out, chain(x))
    ran = {event.name for event in prof.events()}
    assert {"aten::add_", "aten::relu_"} <= ran
    assert not {"aten::add", "aten::relu"} & ran


def test_a_view_whose_fake_tensor_has_a_storage_of_its_own_still_shares_its_base() -> None:
    # In the forward graph AOT autograd partitions out of a training graph, a view saved for the
    # backward can carry a fake tensor of its own storage (BartForCausalLM's `view` of its layer
    # norm's output). The view's schema says what its memory is: `add` must not write into the
    # base, which the caller (the backward) reads through the view.
    def saved_view(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x * 2
        saved = h.view(-1)
        return saved, h.add(w)

    x, w = torch.randn(4, 5), torch.randn(4, 5)
    gm = make_fx(saved_view, tracing_mode="fake")(x, w)
    (view,) = [n for n in gm.graph.nodes if n.target is aten.view.default]
    view.meta["val"] = torch.empty_like(view.meta["val"])  # a storage of its own, as AOT left it
    reinplace_intermediates(gm.graph)
    gm.recompile()
    assert not any(n.target is aten.add_.Tensor for n in gm.graph.nodes)
    got = gm(x, w)
    expected = saved_view(x, w)
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])


def test_an_op_without_a_schema_may_return_any_operand() -> None:
    # A Python function in the graph (a user pass's helper, say) hides what its result aliases:
    # what reads its result reads its operands' memory.
    def through(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x * 2
        return h.view(-1), h.add(1)

    x = torch.randn(4, 5)
    gm = make_fx(through, tracing_mode="fake")(x)
    (view,) = [n for n in gm.graph.nodes if n.target is aten.view.default]
    view.target = _flat  # no schema, no fake tensor: the pass cannot know it is a view
    view.args = view.args[:1]
    view.meta.pop("val")
    reinplace_intermediates(gm.graph)
    gm.recompile()
    assert not any(n.target is aten.add_.Tensor for n in gm.graph.nodes)
    got = gm(x)
    torch.testing.assert_close(got[0], (x * 2).view(-1))


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.view(-1)


def _prepared_aot_graph(fn: Callable[..., object], *args: torch.Tensor) -> torch.fx.GraphModule:
    """The AOT forward graph of ``fn`` after npu_streams' pass (each node labelled its stream)."""
    import npu_streams
    from torch._functorch.aot_autograd import aot_module_simplified

    graphs: list[torch.fx.GraphModule] = []

    def prepared(gm: torch.fx.GraphModule, example: object) -> Callable[..., object]:
        graphs.append(npu_streams.prepare_for_capture(gm))
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example: list[torch.Tensor]) -> Callable[..., object]:
        return aot_module_simplified(gm, example, fw_compiler=prepared)  # type: ignore[no-any-return]

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=backend, fullgraph=True)(*args)
    torch._dynamo.reset()
    (graph,) = graphs
    return graph


def test_memory_another_stream_reads_is_not_written_in_place() -> None:
    # `a + 1` on the side stream is the last reader of `a`, but `a * 3` on the main stream read
    # it earlier and may still be running when the side stream writes: on a device `r` would
    # see the new values. Nothing orders a write after an earlier read on another stream.
    from npu_streams import npu_stream_switch

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x * 2
        r = a * 3
        with npu_stream_switch("side"):
            b = a + 1
        return r, b

    gm = _prepared_aot_graph(fn, torch.randn(4))
    reinplace_intermediates(gm.graph)
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "aten.add_.Tensor" not in targets

    def one_stream(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x * 2
        with npu_stream_switch("side"):
            b = a + 1  # the only reader of `a`, after the wait on its producer
        return x, b

    gm = _prepared_aot_graph(one_stream, torch.randn(4))
    reinplace_intermediates(gm.graph)
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "aten.add_.Tensor" in targets
