"""``record()``/``wait()`` inside a graph on a device: the markers live on the graph's device.

``npu_streams.record()`` returns an empty marker tensor. Traced, it is a CPU tensor, and the split
check reads a CPU tensor inside a device graph as CPU work: the graph was captured in pieces on
every accelerator, with the fork/join events of its stream scope in different pieces (and a wait
on an event recorded in another capture is refused). The CPU emulation splits nothing, so here
meta tensors stand in for a device's, with a graph backend for them that captures by running the
graph, as the emulation does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import npu_compile
import npu_streams
import pytest
import torch
from npu_compile import _pipeline
from npu_compile._piecewise import split_points
from npu_mempool import PoolHandle, _devices


class _MetaGraph:
    def __init__(self, rerun: Any) -> None:
        self._rerun = rerun

    def replay(self, args: tuple[Any, ...]) -> None:
        self._rerun(args)  # meta tensors carry no values: running the ops is all there is

    def reset(self) -> None:
        pass


class _MetaBackend:
    """Graphs of meta tensors: a capture runs the body, a replay runs it again."""

    name = "meta (test)"
    executes_on_capture = True
    default_warmup_runs = 0

    def new_pool(self, device: torch.device) -> PoolHandle:
        return PoolHandle(device, native=("meta", 0))

    def capture(self, pool: PoolHandle, body: Any, error_mode: str = "thread_local") -> Any:
        with torch.no_grad():
            leaves, rerun, _ = body(lambda x: torch.empty_like(x))
        return _MetaGraph(rerun), leaves

    def checkpoint(self, pool: PoolHandle) -> bool:
        return False

    def rewind(self, pool: PoolHandle) -> bool:
        return False


@pytest.fixture
def meta_device(monkeypatch: pytest.MonkeyPatch) -> Iterator[torch.device]:
    """The backend sees meta tensors as a device's, with a graph implementation for them."""
    device = torch.device("meta")
    monkeypatch.setattr(_pipeline, "accelerator_device", lambda inputs: device)
    _devices.register(_devices.DeviceType("meta", _MetaBackend), replace=True)
    yield device
    _devices.unregister("meta")


def _forked(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    marker = npu_streams.record()
    with npu_streams.npu_stream_switch("side"):
        npu_streams.wait([marker])
        z = y + 1
    return z * 3


def test_a_graph_using_record_and_wait_is_captured_whole_on_a_device(
    meta_device: torch.device, fresh_tagged_events: None
) -> None:
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(_forked, backend=backend, fullgraph=True)
    with torch.no_grad():
        out = compiled(torch.ones(4, device=meta_device))
    assert out.device == meta_device
    assert out.shape == (4,)
    assert backend.stats.captured == 1
    assert backend.stats.piecewise == 0, backend.stats.splits
    assert backend.stats.fallbacks == []


def _aot_forward(fn: Any, *args: torch.Tensor) -> torch.fx.GraphModule:
    from torch._functorch.aot_autograd import aot_module_simplified

    graphs: list[torch.fx.GraphModule] = []

    def forward_compiler(gm: torch.fx.GraphModule, example: Sequence[Any]) -> Any:
        graphs.append(gm)
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example: list[Any]) -> Any:
        return aot_module_simplified(gm, example, fw_compiler=forward_compiler)

    with torch.no_grad():
        torch.compile(fn, backend=backend, fullgraph=True)(*args)
    (graph,) = graphs
    return graph


def test_prepare_for_capture_puts_the_markers_on_the_graph_s_device(
    fresh_tagged_events: None,
) -> None:
    device = torch.device("meta")
    graph = _aot_forward(_forked, torch.ones(4, device=device))
    markers = [n for n in graph.graph.nodes if "npu_streams.record" in str(n.target)]
    assert markers
    assert all(n.meta["val"].device.type == "cpu" for n in markers)  # as traced
    npu_streams.prepare_for_capture(graph, device)
    assert all(n.meta["val"].device == device for n in markers)
    assert split_points(graph, device, ()) == []
    # And the graph still runs (on the device the markers now name).
    (out,) = graph(torch.ones(4, device=device))
    assert out.device == device


@pytest.mark.device
def test_record_and_wait_under_the_backend_on_the_accelerator(fresh_tagged_events: None) -> None:
    from npu_compile._tools.device import best_device

    device = best_device()
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(_forked, backend=backend, fullgraph=True)
    with torch.no_grad():
        for _ in range(3):  # warm-up (CUDA), capture, replay
            x = torch.randn(8, 8, device=device)
            # `z * 3` reads the side stream's `z` with no wait of the user's: the backend orders
            # it (a replay ran it beside `y + 1`: every element wrong). An eager reference on
            # streams would race the same way, so the reference is the arithmetic.
            torch.testing.assert_close(compiled(x), (x * 2 + 1) * 3)
    assert backend.stats.captured == 1
    assert backend.stats.piecewise == 0, backend.stats.splits
    assert backend.stats.fallbacks == []


# -- stream scopes in a graph split into pieces ----------------------------------------------


@torch.library.custom_op("npu_compile_test::opaque", mutates_args=())
def _opaque(x: torch.Tensor) -> torch.Tensor:
    # Stands for an op that runs between pieces (vLLM's attention, named in splitting_ops).
    return x.clone()


@_opaque.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _split_then_side_stream(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    o = torch.ops.npu_compile_test.opaque(y)
    with npu_streams.npu_stream_switch("side"):
        z = o + 1
    return z * 3


def _split_inside_the_scope(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    with npu_streams.npu_stream_switch("side"):
        z = torch.ops.npu_compile_test.opaque(y) + 1
    return z * 3


def _split_at_opaque() -> npu_compile.NpuBackend:
    config = npu_compile.CompilerConfig()
    config.aclgraph_config.splitting_ops = ["npu_compile_test::opaque"]
    return npu_compile.get_npu_backend(compiler_config=config)


@pytest.fixture
def pieces(monkeypatch: pytest.MonkeyPatch) -> list[torch.fx.GraphModule]:
    """The graphs of the pieces the backend captures, in order."""
    from npu_compile import _build

    made: list[torch.fx.GraphModule] = []
    real = _build.piecewise

    def spy(gm: torch.fx.GraphModule, plan: Any, make_runner: Any) -> Any:
        def making(piece: torch.fx.GraphModule, kinds: Any) -> Any:
            made.append(piece)
            return make_runner(piece, kinds)

        return real(gm, plan, making)

    monkeypatch.setattr(_build, "piecewise", spy)
    return made


def _internal(piece: torch.fx.GraphModule) -> list[str]:
    return [
        f"{str(n.target).split('.')[1]}({n.args[0]})"
        for n in piece.graph.nodes
        if "internal_event" in str(n.target)
    ]


@pytest.mark.parametrize("where", ["cpu", "meta"])
def test_each_piece_forks_and_joins_its_own_side_streams(
    where: str,
    request: pytest.FixtureRequest,
    pieces: list[torch.fx.GraphModule],
    fresh_tagged_events: None,
) -> None:
    # The graph's fork used to be recorded in piece 0 and waited on in piece 1: a device refuses
    # a wait on an event another capture recorded, and eagerly the side stream was not ordered
    # after the split op between the pieces.
    device = request.getfixturevalue("meta_device") if where == "meta" else torch.device("cpu")
    backend = _split_at_opaque()
    compiled = torch.compile(_split_then_side_stream, backend=backend, fullgraph=True)
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(4, generator=torch.Generator().manual_seed(i)).to(device)
            out = compiled(x)
            if where == "cpu":
                torch.testing.assert_close(out, _split_then_side_stream(x), rtol=0, atol=0)
    assert backend.stats.fallback_reasons == {}
    assert len(pieces) == 2, [_internal(p) for p in pieces]
    for piece in pieces:
        assert npu_streams.unmatched_waits(piece) == [], _internal(piece)
    first, second = (_internal(p) for p in pieces)
    assert first == []  # no side stream in the first piece: nothing to fork
    assert [event.split("(")[0] for event in second] == [
        "internal_event_record",  # fork, at the piece's start on the main stream
        # `o`, made on the main stream and read on the side stream: ordered in the whole graph,
        # the piece keeps that pair (both ends are in it; `o` is its input by now)
        "internal_event_record",
        "internal_event_wait",  # the side stream waits on the fork
        "internal_event_wait",  # and on `o`
        "internal_event_record",  # after `o + 1` on the side stream, which `z * 3` reads
        "internal_event_record",  # join, on the side stream before its scope ends
        "internal_event_wait",  # the main stream waits for `z` before `z * 3`
        "internal_event_wait",  # and for the join before the piece returns
    ]
    for piece in pieces:
        assert npu_streams.unordered_reads(piece) == [], _internal(piece)


def test_a_split_inside_a_stream_scope_runs_eagerly_with_its_reason(
    fresh_tagged_events: None,
) -> None:
    backend = _split_at_opaque()
    compiled = torch.compile(_split_inside_the_scope, backend=backend, fullgraph=True)
    with torch.no_grad():
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x), _split_inside_the_scope(x), rtol=0, atol=0)
    assert set(backend.stats.fallback_reasons.values()) == {
        npu_compile.FallbackReason.SPLIT_IN_STREAM_SCOPE
    }


def test_prepare_piece_drops_dependencies_across_pieces(fresh_tagged_events: None) -> None:
    # wait(marker) of a tensor made before the split: its record lies in the earlier piece. The
    # later piece's fork orders the side stream after it; the cross-piece pair goes.
    def waits_across(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        marker = npu_streams.record()
        o = torch.ops.npu_compile_test.opaque(y)
        with npu_streams.npu_stream_switch("side"):
            npu_streams.wait([marker])
            z = o + 1
        return z * 3

    graph = _aot_forward(waits_across, torch.ones(4))
    npu_streams.prepare_for_capture(graph)
    opaque = next(n for n in graph.graph.nodes if "opaque" in str(n.target))
    from torch.fx.passes.split_module import split_module

    before = {n.name for n in graph.graph.nodes}
    seen_opaque = False
    part: dict[str, int] = {}
    for node in graph.graph.nodes:
        if node is opaque:
            seen_opaque = True
            part[node.name] = 1
        elif node.name in before and node.op not in ("placeholder", "output"):
            part[node.name] = 2 if seen_opaque else 0
    split = split_module(graph, graph, lambda n: part[n.name], keep_original_order=True)
    later = split.submod_2
    assert npu_streams.unmatched_waits(later) != []  # the whole graph's fork and the marker
    npu_streams.prepare_piece(later)
    assert npu_streams.unmatched_waits(later) == []
    (out,) = split(torch.ones(4))
    torch.testing.assert_close(out, waits_across(torch.ones(4)))
