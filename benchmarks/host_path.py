"""What a device replay still pays on the host: graph calls whose replay does nothing, on the CPU.

    python benchmarks/host_path.py --out DIR [--rounds 25] [--calls 200]
        [--workloads mlp,decode,padded,held,breaks] [--profile] [--smoke]

On a device, a replay's host cost is what stands between the caller and the queued graph: the
compiler's wrapper, Dynamo's guards, the runner's key, its liveness check, the input copy and
the hand-out of the outputs. On the CPU the emulated graph re-runs the ops on every replay, which
buries that cost. Here a null graph backend (``_host_path_null.py``) is registered for the CPU for
the measured rows: a capture runs the body once (static inputs and outputs exist), a replay runs
nothing. What a call then costs is the host path alone.

Workloads (``_host_path_workloads.py``): ``mlp`` (one input), ``decode`` (a decode step: one
token, a KV cache per layer written in place, some 60 inputs), ``padded`` (the MLP at batch 3,
dynamic, npu_compile padding it to the capture size 4), ``held`` (the MLP in the loop users
write, ``out = f(x)``: each call's output is still referenced during the next call; every row,
the floor included, is called through one wrapper that keeps the result) and ``breaks`` (three
graphs per call: graph breaks between three blocks). Elsewhere a call's output is dropped at
once. One thread, ``torch.no_grad()``.

Rows, each called with the same arguments on every call:

- ``floor``: the least a replay can do, by hand: copy the call's inputs into preallocated static
  buffers with one ``torch._foreach_copy_`` and return the preallocated static outputs (one such
  step per graph, chained as the runner row chains its runners).
- ``floor_user``: the same least replay called as a bound graph is, with the first graph's USER
  tensors alone (no pick out of Dynamo's arguments), each graph's outputs feeding the next: the
  floor the bound rows are compared with.
- ``runner``: ``npu_mempool.GraphRunner`` alone on each of the FX graphs Dynamo makes of the
  model, with the input kinds npu_compile gives them (parameters and buffers PARAMETER, KV
  caches MUTATED, the rest USER), null graphs; at the call's own batch in ``padded``.
- ``bound``: each of those runners bound to its captured call (``GraphRunner.bind``) and
  called with the USER tensors alone (``floor_user``'s arguments): the path for engines that
  pick the captured layout themselves (no key, no watched addresses; the inputs' layout and the
  outputs' liveness are still checked).
- ``bound_static``: the same with ``bind(static_outputs=True)``: each call returns the graph's
  own outputs, overwritten by the next call, as vLLM's graph wrapper does (the inputs' layout,
  the runner's lock and the pool's checked outputs are still checked).
- ``dynamo_floor``: ``torch.compile`` with a backend that turns each graph into its floor (the
  row above): Dynamo's own cost plus the least a replay can do, no op run, as in npu_compile's
  row.
- ``dynamo_trivial``: ``torch.compile`` with a backend that returns ``gm.forward``: Dynamo's own
  cost, the graph's ops run (on a device they would be queued, not waited for).
- ``npu_compile``: ``torch.compile`` with npu_compile's backend (default options, capture sizes
  in ``padded``), null graphs.
- ``npu_compile_unguarded``: the same with Dynamo's guards off
  (``options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe}``): the runner's key is
  then the only check a call meets, but Dynamo's frame evaluation still runs on every call.
- ``eager``, ``npu_compile (emulated)``, ``runner (emulated)``: the model itself, and the two
  graph rows with the CPU's usual emulated graph (a replay re-runs the ops): what the CPU tables
  measured before.

Each row's µs per call is the median over ``--rounds`` rounds of ``--calls`` calls each, the rows
alternating within a round (their order reversed every other round), with the interquartile
spread. "Python calls" counts the Python frames a call opens (``sys.setprofile`` ``call``
events over a number of calls, divided by it; C calls not counted); "per replay", for the rows
with graph runners, counts those from a runner's ``__call__`` down, per replay. The script
refuses to report a graph row whose calls were not all replays of the graph it captured before
the rounds (its runners' counters: replays rising by one per call, no capture, no eager call,
no fallback, null graphs where the row says so) or a compiled row that compiled again during
them.

Goals, judged in the same run (a missed goal is reported, not an error): npu_compile at most
dynamo_trivial + 5 µs per call, and at most dynamo_floor + 5 µs (like for like: dynamo_trivial
runs the ops, which the null graph does not, so the first difference is smaller than
npu_compile's host cost by the ops' time); the runner at most floor + 3 µs; at most 10 Python
calls per replay through the runner; the path with no per-call guard evaluation (the bound
graph with static outputs, the engines' path) at most 1.5 times ``floor_user``.
Differences are medians of the rounds' paired differences,
ratios those of the medians. ``--profile`` adds where npu_compile's time over dynamo_floor (and
the runner's over the floor) goes: the Python frames it opens beyond the other's, and cProfile's
time per call of its functions, also scaled to the difference measured without cProfile.

Before anything is measured, the first workload's rows are called for ``--warmup`` seconds (30
by default): a fresh process runs slower for its first tens of seconds on the machines measured.

``DIR/host_path.json`` gets every sample, summary, check and verdict; the tables go to stdout as
Markdown. ``--smoke`` (2 rounds of 5 calls) checks that everything runs, for CI.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import os
import platform
import pstats
import re
import statistics
import subprocess
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import npu_compile  # noqa: E402
import npu_mempool  # noqa: E402
import torch  # noqa: E402
from _common import write_json  # noqa: E402
from _host_path_null import NullBackend, null_graphs  # noqa: E402
from _host_path_workloads import WORKLOADS, Workload, statics_and_caches  # noqa: E402
from npu_compile.tools import alternate  # noqa: E402
from npu_mempool import GraphRunner, InputKind  # noqa: E402
from npu_mempool._static_bound import StaticBoundGraph  # noqa: E402

#: The goals, in µs per call over the row they are measured against, and Python calls per replay.
NPU_COMPILE_OVER_DYNAMO_US = 5.0
RUNNER_OVER_FLOOR_US = 3.0
RUNNER_CALLS_PER_REPLAY = 10
UNGUARDED_OVER_FLOOR_RATIO = 1.5

#: Rows in table order; the ones after ``eager`` use the CPU's emulated graph.
ROWS = (
    "floor",
    "floor_user",
    "runner",
    "bound",
    "bound_static",
    "dynamo_floor",
    "dynamo_trivial",
    "npu_compile",
    "npu_compile_unguarded",
    "eager",
    "npu_compile_emulated",
    "runner_emulated",
)
LABELS = {
    "floor_user": "floor (USER tensors)",
    "bound": "bound graph (runner.bind)",
    "bound_static": "bound graph, static outputs",
    "npu_compile_unguarded": "npu_compile (no guards)",
    "npu_compile_emulated": "npu_compile (emulated)",
    "runner_emulated": "runner (emulated)",
}
#: Warm-up calls of every row before the rounds: compile, capture, the first replays.
WARMUP_CALLS = 3

#: Where a replay's frames begin: a runner's call, or a bound graph's.
_RUNNER_CALLS = (
    GraphRunner.__call__.__code__,
    npu_mempool.BoundGraph.__call__.__code__,
    StaticBoundGraph.__call__.__code__,
)
#: Marks the name of a row's copy of a model's forward (see _own_code); left out where frames
#: of two rows are compared.
_ROW_MARK = "__row_"
_ROW_NAME = re.compile(re.escape(_ROW_MARK) + r"[a-z_]+?(?=_at_\d|$)")


@dataclasses.dataclass
class Row:
    """One way of making the call, with what proves that its timed calls were what it says.

    Attributes:
        call: Called as ``call(*args)`` on every timed call.
        args: The call's arguments.
        runners: The graph runners whose replays answer the call (graph rows).
        null: The null backend the runners must have captured with (``None``: emulated).
        compiles: How many times Dynamo has handed this row's backend a graph (compiled rows).
    """

    call: Callable[..., Any]
    args: tuple[Any, ...]
    runners: Callable[[], list[GraphRunner]] = lambda: []
    null: NullBackend | None = None
    compiles: Callable[[], int] | None = None


# -- building the rows -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Piece:
    """One FX graph of the call, as the runner and floor rows call it.

    Attributes:
        forward: The graph's forward (Dynamo's graph module).
        template: Its arguments (Dynamo's example inputs, sizes as ints).
        kinds: The input kind of each argument, as npu_compile gives them.
        fed: Positions of the USER tensors: the call's inputs (first graph) or the previous
            graph's outputs, in order.
    """

    forward: Callable[..., Any]
    template: tuple[Any, ...]
    kinds: tuple[InputKind, ...]
    fed: tuple[int, ...]


def _concrete(value: Any) -> Any:
    """A size Dynamo passes as a ``SymInt`` becomes the int the call has."""
    if isinstance(value, torch.SymInt):
        return value.node.hint
    return value


def pieces_of(
    graphs: Sequence[tuple[torch.fx.GraphModule, list[Any]]], model: torch.nn.Module
) -> list[Piece]:
    statics, caches = statics_and_caches(model)
    pieces = []
    for gm, example in graphs:
        kinds = []
        for value in example:
            if id(value) in caches:
                kinds.append(InputKind.MUTATED)
            elif id(value) in statics:
                kinds.append(InputKind.PARAMETER)
            else:
                kinds.append(InputKind.USER)
        fed = tuple(
            i
            for i, (value, kind) in enumerate(zip(example, kinds, strict=True))
            if kind is InputKind.USER and isinstance(value, torch.Tensor)
        )
        template = tuple(_concrete(value) for value in example)
        pieces.append(Piece(gm.forward, template, tuple(kinds), fed))
    return pieces


def chain(functions: Sequence[Callable[..., Any]], pieces: Sequence[Piece]) -> Callable[..., Any]:
    """One call of several graphs: each graph's USER tensors are the previous graph's outputs."""
    steps = list(zip(functions, (p.template for p in pieces), (p.fed for p in pieces), strict=True))
    first, rest = steps[0], steps[1:]

    def step(*args: Any) -> Any:
        outputs = first[0](*args)
        for function, template, fed in rest:
            given = list(template)
            for position, value in zip(fed, outputs, strict=True):
                given[position] = value
            outputs = function(*given)
        return outputs

    return step


def _floor_buffers(piece: Piece) -> tuple[list[torch.Tensor], tuple[torch.Tensor, ...]]:
    """A floor's static inputs (one per USER tensor) and its static outputs."""
    with torch.no_grad():
        outputs = tuple(t.clone() for t in piece.forward(*piece.template))
    return [piece.template[i].clone() for i in piece.fed], outputs


def chain_fed(calls: Sequence[Callable[..., Any]]) -> Callable[..., Any]:
    """Calls taking USER tensors alone, chained: each is given the previous one's outputs."""
    if len(calls) == 1:
        return calls[0]  # no frame of its own, as an engine calls one graph
    first, rest = calls[0], calls[1:]

    def chained(*given: Any) -> Any:
        outputs = first(*given)
        for call in rest:
            outputs = call(*outputs)
        return outputs

    return chained


def floor_of(piece: Piece) -> Callable[..., Any]:
    """The least a replay of ``piece`` can do: copy the inputs in, return the static outputs."""
    static, outputs = _floor_buffers(piece)
    fed = piece.fed
    foreach_copy = torch._foreach_copy_

    def replay(*args: Any) -> Any:
        foreach_copy(static, [*map(args.__getitem__, fed)])
        return outputs

    return replay


def user_floor_of(pieces: Sequence[Piece]) -> Callable[..., Any]:
    """The floor called as a bound graph is: with the first graph's USER tensors alone.

    Each graph's step copies what it is given into its static buffers and returns its static
    outputs, which feed the next graph, as the bound rows chain their graphs.
    """
    foreach_copy = torch._foreach_copy_

    def step_of(piece: Piece) -> Callable[..., Any]:
        static, outputs = _floor_buffers(piece)

        def step(*given: Any) -> Any:
            foreach_copy(static, given)
            return outputs

        return step

    return chain_fed([step_of(piece) for piece in pieces])


def looped(workload: Workload, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` as the workload's loop calls it: ``held`` keeps each output into the next call."""
    if not workload.held:
        return call
    held: list[Any] = [None]

    def call_holding(*args: Any) -> Any:
        # Stored once the call has returned: during the call the previous output is still
        # alive, as in ``for x in data: out = f(x)``.
        held[0] = call(*args)
        return held[0]

    return call_holding


def _call_args(pieces: Sequence[Piece]) -> tuple[Any, ...]:
    # The first graph's arguments are the call's own tensors (Dynamo passes them), parameters
    # and caches included: what npu_compile's runner gets from Dynamo on every call.
    return pieces[0].template


def _own_code(model: torch.nn.Module, row: str) -> torch.nn.Module:
    """``model``, its ``forward`` a copy with a code object of its own: a Dynamo cache per row.

    Dynamo keeps compiled code per code object. Rows sharing one would share one cache: every
    call would walk the other rows' entries first, comparing backends (two npu_compile backends
    with the same options compare their whole configs, about a millisecond), and a row could run
    another row's graphs. A program compiles a model with one backend; so does each row here.
    """
    cls = type(model)
    forward = cls.forward
    # Another name, so that the copy is not equal to the original either: Dynamo keys the code
    # of its resume functions (after a graph break) by the code object's value.
    code = forward.__code__.replace(co_name=f"{forward.__name__}{_ROW_MARK}{row}")
    copied = types.FunctionType(
        code, forward.__globals__, code.co_name, forward.__defaults__, forward.__closure__
    )
    model.__class__ = type(f"{cls.__name__}_{row}", (cls,), {"forward": copied})
    return model


def build_rows(workload: Workload) -> dict[str, Row]:
    """Every row of ``workload``, compiled, captured and warmed up."""
    rows: dict[str, Row] = {}
    graphs: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def trivial(gm: torch.fx.GraphModule, example: list[Any]) -> Callable[..., Any]:
        graphs.append((gm, list(example)))
        return gm.forward

    model, inputs = workload.make()
    model = _own_code(model, "dynamo_trivial")
    dynamo = torch.compile(model, backend=trivial, dynamic=workload.dynamic)
    rows["dynamo_trivial"] = Row(looped(workload, dynamo), inputs, compiles=lambda: len(graphs))
    eager_model, eager_inputs = workload.make()
    rows["eager"] = Row(looped(workload, eager_model), eager_inputs)
    with torch.no_grad():
        dynamo(*inputs)
    if len(graphs) != workload.graphs:
        raise SystemExit(
            f"{workload.name}: Dynamo made {len(graphs)} graph(s) of one call, expected "
            f"{workload.graphs}; the rows would not compare like with like"
        )
    pieces = pieces_of(graphs, model)
    for i in pieces[0].fed:
        if not any(pieces[0].template[i] is x for x in inputs):
            raise SystemExit(f"{workload.name}: the first graph's USER input {i} is no call input")
    args = _call_args(pieces)
    floors = [floor_of(piece) for piece in pieces]
    floor = floors[0] if len(floors) == 1 else chain(floors, pieces)
    rows["floor"] = Row(looped(workload, floor), args)
    # What an engine calling a bound graph holds: the first graph's USER tensors alone.
    user_args = tuple(args[i] for i in pieces[0].fed)
    rows["floor_user"] = Row(looped(workload, user_floor_of(pieces)), user_args)
    rows["dynamo_floor"] = dynamo_floor_row(workload)

    def runner_row(null: NullBackend | None, held: bool = True) -> Row:
        runners = [
            GraphRunner(piece.forward, input_kinds=piece.kinds, name=f"{workload.name}_{i}")
            for i, piece in enumerate(pieces)
        ]
        functions = [runner.as_function() for runner in runners]
        call = functions[0] if len(functions) == 1 else chain(functions, pieces)
        return Row(
            looped(workload, call) if held else call, args, runners=lambda: runners, null=null
        )

    def bound_row(runner_row: Row, static: bool = False) -> Row:
        # Bound to the calls its runners captured (their warm-up), as an engine binds each
        # captured size once; each graph's USER tensors are fed the previous graph's outputs.
        runners = runner_row.runners()
        bound = [
            runner.bind(*piece.template, static_outputs=static)
            for runner, piece in zip(runners, pieces, strict=True)
        ]
        # Called as an engine calls it, with the USER tensors alone, and chained as floor_user.
        return Row(
            looped(workload, chain_fed(bound)),
            user_args,
            runners=lambda: runners,
            null=runner_row.null,
        )

    def npu_compile_row(null: NullBackend | None, name: str = "npu_compile") -> Row:
        compiled_model, compiled_inputs = workload.make()
        compiled_model = _own_code(compiled_model, name if null else "emulated")
        backend = npu_compile.get_npu_backend(compiler_config=workload.compiler_config())
        # Without guards, Dynamo runs the cached code on every call; the runner's key decides.
        options = (
            {"guard_filter_fn": torch.compiler.skip_all_guards_unsafe}
            if name == "npu_compile_unguarded"
            else None
        )
        compiled = torch.compile(
            compiled_model, backend=backend, dynamic=workload.dynamic, options=options
        )
        return Row(
            looped(workload, compiled),
            compiled_inputs,
            runners=lambda: backend.stats.runners,
            null=null,
            compiles=lambda: backend.stats.fx_graphs,
        )

    with null_graphs() as null:
        rows["runner"] = runner_row(null)
        rows["npu_compile"] = npu_compile_row(null)
        rows["npu_compile_unguarded"] = npu_compile_row(null, "npu_compile_unguarded")
        warm_up(rows, ("runner", "npu_compile", "npu_compile_unguarded"))
        # Runners of its own, so that each row's counters see its own calls alone.
        # Called with each output dropped: a held one would stay alive in the row for good,
        # beside the bound row's own (the bound row's warm-up captures its second call path).
        for name, static in (("bound", False), ("bound_static", True)):
            to_bind = {"to_bind": runner_row(null, held=False)}
            warm_up(to_bind, ("to_bind",))
            rows[name] = bound_row(to_bind["to_bind"], static)
        warm_up(rows, ("bound", "bound_static"))
    rows["runner_emulated"] = runner_row(None)
    rows["npu_compile_emulated"] = npu_compile_row(None)
    warm_up(rows, ("floor", "floor_user", "dynamo_floor", "dynamo_trivial", "eager"))
    warm_up(rows, ("runner_emulated", "npu_compile_emulated"))
    graph_rows = ("runner", "bound", "bound_static", "npu_compile", "npu_compile_unguarded")
    for name in (*graph_rows, "runner_emulated", "npu_compile_emulated"):
        check_graphs(workload, name, rows[name])
    return {name: rows[name] for name in ROWS}


def dynamo_floor_row(workload: Workload) -> Row:
    """``torch.compile`` with a backend whose graphs do what the floor does: Dynamo's cost alone.

    Like-for-like with npu_compile's null-graph row, which runs no op either: what npu_compile
    adds to a call over it is its own host path (runner, wrappers), nothing of the graph's work.
    """
    model, inputs = workload.make()
    model = _own_code(model, "dynamo_floor")
    compiles = []

    def floor_backend(gm: torch.fx.GraphModule, example: list[Any]) -> Callable[..., Any]:
        compiles.append(gm)
        (piece,) = pieces_of([(gm, list(example))], model)
        return floor_of(piece)

    compiled = torch.compile(model, backend=floor_backend, dynamic=workload.dynamic)
    return Row(looped(workload, compiled), inputs, compiles=lambda: len(compiles))


def warm_up(rows: dict[str, Row], names: Sequence[str]) -> None:
    with torch.no_grad():
        for name in names:
            row = rows[name]
            for _ in range(WARMUP_CALLS):
                row.call(*row.args)


def warm_process(workload: Workload, seconds: float) -> float:
    """Call ``workload``'s rows for ``seconds`` before anything is measured; return the time.

    A fresh process measured at once runs slower for its first tens of seconds, by as much as
    1.8 times on the virtual machines of RESULTS.md (the floor too, which is one copy): the
    first workload measured would read slower than the others.
    """
    if seconds <= 0:
        return 0.0
    started = time.perf_counter()
    rows = build_rows(workload)
    with torch.no_grad():
        while time.perf_counter() - started < seconds:
            for row in rows.values():
                for _ in range(50):
                    row.call(*row.args)
    return time.perf_counter() - started


def check_graphs(workload: Workload, name: str, row: Row) -> None:
    """The row's runners are the workload's graphs, captured once each, with the right backend."""
    runners = row.runners()
    if len(runners) != workload.graphs:
        raise SystemExit(
            f"{workload.name}/{name}: {len(runners)} graph runner(s), expected {workload.graphs} "
            "(a graph that fell back runs eagerly and times no replay)"
        )
    for runner in runners:
        # A loop holding each output into the next call captures a second call path where the
        # runner keeps held outputs (npu_compile takes them back instead: one capture); one
        # capture there would mean the row's calls did not hold what the workload says.
        # A static bound graph hands out the same outputs: it needs no second path.
        captures = (
            2
            if workload.held and runner.options.keep_held_outputs and name != "bound_static"
            else 1
        )
        if runner.counters.captures != captures or runner.counters.fallbacks:
            raise SystemExit(
                f"{workload.name}/{name}: runner {runner.name} has counters "
                f"{runner.counters.snapshot()}, expected {captures} capture(s) and no fallback"
            )
        pool = runner.pool
        null = row.null is not None and pool is not None and pool in row.null.pools
        if null != (row.null is not None):
            raise SystemExit(
                f"{workload.name}/{name}: runner {runner.name} captured with the "
                f"{'emulated' if row.null is not None else 'null'} graph, not the one the row "
                "names"
            )


# -- measuring ---------------------------------------------------------------------------------


def sampler(row: Row, calls: int) -> Callable[[], float]:
    call, args = row.call, row.args

    def sample() -> float:
        gc.disable()
        try:
            start = time.perf_counter()
            for _ in range(calls):
                call(*args)
            elapsed = time.perf_counter() - start
        finally:
            gc.enable()
        return elapsed / calls * 1e6

    return sample


def snapshot(row: Row) -> tuple[list[dict[str, Any]], int | None]:
    counters = [runner.counters.snapshot() for runner in row.runners()]
    return counters, row.compiles() if row.compiles is not None else None


def replay_check(
    workload: str, name: str, row: Row, before: tuple[list[dict[str, Any]], int | None], calls: int
) -> dict[str, Any]:
    """How the row's counters moved over ``calls`` calls; exits unless all were replays."""
    after = snapshot(row)
    moved = [
        {
            field: a[field] - b[field]
            for field in ("replays", "captures", "eager_calls", "fallbacks")
        }
        for b, a in zip(before[0], after[0], strict=True)
    ]
    expected = {"replays": calls, "captures": 0, "eager_calls": 0, "fallbacks": 0}
    compiled = None if before[1] is None else after[1] - before[1]  # type: ignore[operator]
    held = all(m == expected for m in moved) and compiled in (None, 0)
    check = {"calls": calls, "runners": moved, "compiled_again": compiled, "held": held}
    if not held:
        raise SystemExit(
            f"{workload}/{name}: the timed calls were not all replays of the captured graphs "
            f"(counters moved by {moved}, expected {expected} per runner; graphs compiled again: "
            f"{compiled}); its times are no replay's, so none is reported"
        )
    return check


@dataclasses.dataclass
class FrameCount:
    per_call: float
    per_replay: float | None
    functions: Counter[str]


def _where(frame: types.FrameType) -> str:
    code = frame.f_code
    path = Path(code.co_filename)
    parts = path.parts
    for anchor in ("site-packages", "src", "benchmarks"):
        if anchor in parts:
            parts = parts[parts.index(anchor) + 1 :]
            break
    return f"{'/'.join(parts)}:{code.co_firstlineno}({_ROW_NAME.sub('', code.co_name)})"


def count_frames(name: str, row: Row, calls: int) -> FrameCount:
    """Python frames per call of ``row`` (and per replay, inside the runners' ``__call__``)."""
    total = 0
    inside = 0  # depth inside a runner's __call__
    in_runner = 0
    functions: Counter[str] = Counter()

    def profile(frame: types.FrameType, event: str, arg: object) -> None:
        nonlocal total, inside, in_runner
        if event == "call":
            total += 1
            functions[_where(frame)] += 1
            if inside or frame.f_code in _RUNNER_CALLS:
                inside += 1
                in_runner += 1
        elif event == "return" and inside:
            inside -= 1

    call, args = row.call, row.args
    runners = row.runners()
    replays = sum(r.counters.replays for r in runners)
    with torch.no_grad():
        gc.disable()
        sys.setprofile(profile)
        try:
            for _ in range(calls):
                call(*args)
        finally:
            sys.setprofile(None)
            gc.enable()
    replayed = sum(r.counters.replays for r in runners) - replays
    if runners and replayed != calls * len(runners):
        raise SystemExit(
            f"{name}: the calls whose frames were counted were not all replays ({replayed} "
            f"replays over {len(runners)} runner(s) in {calls} calls)"
        )
    per_replay = in_runner / replayed if replayed else None
    return FrameCount(total / calls, per_replay, functions)


def profile_over(
    row: Row,
    against: Row,
    frames: FrameCount,
    against_frames: FrameCount,
    frame_calls: int,
    calls: int,
    measured_us: float,
) -> dict[str, Any]:
    """Where ``row``'s time over ``against`` goes: extra frames, and cProfile's time per call.

    The frames are those :func:`count_frames` counted over ``frame_calls`` calls; cProfile
    runs ``calls`` calls of each. cProfile's own cost per event inflates every function's time;
    ``scaled_us_per_call_over`` shares out the difference measured without it
    (``measured_us``) in proportion to cProfile's differences: an estimate, for the ranking's
    sake in µs.
    """
    extra = {
        name: (count - against_frames.functions.get(name, 0)) / frame_calls
        for name, count in frames.functions.items()
        if count > against_frames.functions.get(name, 0)
    }
    timed: dict[str, dict[str, float]] = {}
    for label, measured in (("row", row), ("against", against)):
        profiler = cProfile.Profile()
        with torch.no_grad():
            profiler.enable()
            for _ in range(calls):
                measured.call(*measured.args)
            profiler.disable()
        stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        timed[label] = {
            f"{Path(file).name}:{line}({_ROW_NAME.sub('', name)})": total / calls * 1e6
            for (file, line, name), (_, _, total, _, _) in stats.items()
        }
    mine, theirs = timed["row"], timed["against"]
    over = {name: us - theirs.get(name, 0.0) for name, us in mine.items()}
    top = sorted(over.items(), key=lambda item: -item[1])[:15]
    profiled = sum(mine.values()) - sum(theirs.values())
    scale = max(0.0, measured_us) / profiled if profiled > 0 else 0.0
    return {
        "extra_frames_per_call": dict(sorted(extra.items(), key=lambda item: -item[1])),
        "cprofile_us_per_call_over": dict(top),
        "scaled_us_per_call_over": {name: us * scale for name, us in top},
        "measured_us_over": measured_us,
        "cprofile_total_us_per_call": {
            "row": sum(mine.values()),
            "against": sum(theirs.values()),
        },
        "note": "cProfile's own cost inflates every function's time; the scaled column shares "
        "out the difference measured without cProfile in proportion: read it as a ranking",
    }


def measure(
    workload: Workload, rounds: int, calls: int, frame_calls: int, profile: bool
) -> dict[str, Any]:
    rows = build_rows(workload)
    before = {name: snapshot(row) for name, row in rows.items()}
    with torch.no_grad():
        taken = alternate(
            {name: sampler(row, calls) for name, row in rows.items()},
            min_rounds=rounds,
            max_rounds=rounds,
            tolerance=float("inf"),
            max_seconds=float("inf"),
        )
    checks = {
        name: replay_check(workload.name, name, rows[name], before[name], rounds * calls)
        for name in rows
        if rows[name].runners() or rows[name].compiles is not None
    }
    frames = {
        name: count_frames(f"{workload.name}/{name}", row, frame_calls)
        for name, row in rows.items()
    }
    result: dict[str, Any] = {"what": workload.what, "graphs": workload.graphs, "rows": {}}
    for name in rows:
        summary = taken.summary(name)
        result["rows"][name] = {
            "label": LABELS.get(name, name),
            "emulated": name in ("npu_compile_emulated", "runner_emulated"),
            "us": summary.median,
            "min_us": summary.min,
            "spread_us": summary.spread,
            "uncertainty": summary.uncertainty,
            "samples_us": list(taken.samples[name]),
            "py_calls_per_call": frames[name].per_call,
            "py_calls_per_replay": frames[name].per_replay,
        }
    result["replay_checks"] = checks
    result["goals"] = judge(result["rows"], taken.samples)
    result["emulated_npu_compile_over_dynamo_trivial_us"] = paired(
        taken.samples, "npu_compile_emulated", "dynamo_trivial"
    )
    if profile:
        result["profile"] = {
            f"{row}_over_{against}": profile_over(
                rows[row],
                rows[against],
                frames[row],
                frames[against],
                frame_calls,
                calls,
                paired(taken.samples, row, against),
            )
            for row, against in PROFILED
        }
    return result


#: The pairs ``--profile`` compares: npu_compile against Dynamo with floor graphs (like for like:
#: neither runs an op), and the runner against the floor.
PROFILED = (("npu_compile", "dynamo_floor"), ("runner", "floor"))


def paired(samples: Mapping[str, Sequence[float]], row: str, against: str) -> float:
    """The median over rounds of ``row`` minus ``against`` within the round."""
    return statistics.median(a - b for a, b in zip(samples[row], samples[against], strict=True))


def judge(
    rows: dict[str, dict[str, Any]], samples: Mapping[str, Sequence[float]]
) -> dict[str, Any]:
    """The goals of one workload, each with its measure, its ratio and whether it is met."""

    def over(row: str, against: str, limit: float) -> dict[str, Any]:
        difference = paired(samples, row, against)
        return {
            "goal": f"{row} <= {against} + {limit:g} us",
            "over_us": difference,
            "ratio": rows[row]["us"] / rows[against]["us"],
            "limit_us": limit,
            "met": difference <= limit,
            "missed_by_us": max(0.0, difference - limit),
        }

    per_replay = rows["runner"]["py_calls_per_replay"]
    unguarded = rows["npu_compile_unguarded"]["us"] / rows["floor"]["us"]
    # A bound graph is called with the USER tensors alone: its floor is called so too.
    bound = rows["bound"]["us"] / rows["floor_user"]["us"]
    static = rows["bound_static"]["us"] / rows["floor_user"]["us"]
    return {
        # As the goal is written: dynamo_trivial runs the graph's ops, the null graph does not,
        # so this difference is less than npu_compile's own host cost by the ops' time.
        "npu_compile_over_dynamo_trivial": over(
            "npu_compile", "dynamo_trivial", NPU_COMPILE_OVER_DYNAMO_US
        ),
        # Like for like: neither row runs an op.
        "npu_compile_over_dynamo_floor": over(
            "npu_compile", "dynamo_floor", NPU_COMPILE_OVER_DYNAMO_US
        ),
        "runner_over_floor": over("runner", "floor", RUNNER_OVER_FLOOR_US),
        "runner_py_calls_per_replay": {
            "goal": f"runner <= {RUNNER_CALLS_PER_REPLAY} Python calls per replay",
            "measured": per_replay,
            "limit": RUNNER_CALLS_PER_REPLAY,
            "met": per_replay is not None and per_replay <= RUNNER_CALLS_PER_REPLAY,
            "missed_by": None
            if per_replay is None
            else max(0.0, per_replay - RUNNER_CALLS_PER_REPLAY),
        },
        # The path with no per-call guard evaluation for engines that dispatch themselves: a
        # bound graph (no key, no addresses) handing out its own outputs, as vLLM's wrapper.
        "bound_static_over_floor": {
            "goal": f"bound_static <= {UNGUARDED_OVER_FLOOR_RATIO:g} x floor_user",
            "ratio": static,
            "limit_ratio": UNGUARDED_OVER_FLOOR_RATIO,
            "met": static <= UNGUARDED_OVER_FLOOR_RATIO,
            "over_us": paired(samples, "bound_static", "floor_user"),
            "runner_over_bound_us": paired(samples, "runner", "bound_static"),
        },
        # The checked bound graph (a new view per output, liveness, step token): no goal of its
        # own, measured for comparison.
        "bound_over_floor": {
            "goal": None,
            "ratio": bound,
            "met": None,
            "over_us": paired(samples, "bound", "floor_user"),
            "runner_over_bound_us": paired(samples, "runner", "bound"),
        },
        # Through torch.compile without Dynamo's guards: no goal of its own (Dynamo's frame
        # evaluation alone is several times the floor), measured for comparison.
        # "met" is None: a figure, which goals_met leaves out.
        "unguarded_over_floor": {
            "goal": None,
            "ratio": unguarded,
            "met": None,
            # What turning the guards off saves, and what is left over Dynamo's own least path.
            "saved_us": paired(samples, "npu_compile", "npu_compile_unguarded"),
            "over_dynamo_floor_us": paired(samples, "npu_compile_unguarded", "dynamo_floor"),
        },
    }


# -- reporting ---------------------------------------------------------------------------------


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=HERE, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def machine() -> dict[str, Any]:
    status = _git("status", "--porcelain", "--", str(HERE.parent / "packages"))
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "packages_modified": None if status is None else bool(status),
        "date": time.strftime("%Y-%m-%d"),
    }


def _number(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


GOAL_LABELS = {
    "npu_compile_over_dynamo_trivial": "npu_compile - dynamo_trivial ≤ 5 µs (as written)",
    "npu_compile_over_dynamo_floor": "npu_compile - dynamo_floor ≤ 5 µs (like for like)",
    "runner_over_floor": "runner - floor ≤ 3 µs",
    "runner_py_calls_per_replay": "runner: ≤ 10 Python calls per replay",
    "bound_static_over_floor": "bound graph, static outputs (no guards, no key) ≤ 1.5x the floor "
    "(USER tensors)",
    "bound_over_floor": "bound graph, checked outputs / the floor (USER tensors; a figure)",
    "unguarded_over_floor": "npu_compile (no guards) / the floor (a figure, no goal)",
}


def _goal_cell(goal: dict[str, Any]) -> str:
    if "runner_over_bound_us" in goal:
        verdict = {True: "met", False: "**missed**", None: "no goal"}[goal["met"]]
        return (
            f"{goal['ratio']:.1f}x: {verdict} ({goal['over_us']:+.1f} µs over the floor; "
            f"{goal['runner_over_bound_us']:.1f} µs less than the runner)"
        )
    if "saved_us" in goal:
        return (
            f"{goal['ratio']:.1f}x (the guards cost {goal['saved_us']:.1f} µs; "
            f"{goal['over_dynamo_floor_us']:+.1f} µs over dynamo_floor)"
        )
    if "over_us" in goal:
        verdict = "met" if goal["met"] else f"**missed by {goal['missed_by_us']:.1f} µs**"
        return f"{goal['over_us']:+.1f} µs ({goal['ratio']:.2f}x): {verdict}"
    verdict = "met" if goal["met"] else f"**missed by {_number(goal['missed_by'])}**"
    return f"{_number(goal['measured'])}: {verdict}"


def markdown(results: dict[str, Any]) -> str:
    """The tables: µs per call, Python calls, the goals (rows of ``ROWS``, workload columns)."""
    workloads = results["workloads"]
    names = list(workloads)
    head = "| row | " + " | ".join(names) + " |"
    rule = "|---|" + "---:|" * len(names)
    lines = [
        "µs per call, median over rounds (interquartile spread):",
        "",
        head,
        rule,
    ]
    for row in ROWS:
        cells = [workloads[n]["rows"][row] for n in names]
        lines.append(
            f"| {LABELS.get(row, row)} | "
            + " | ".join(f"{_number(c['us'])} ({_number(c['spread_us'])})" for c in cells)
            + " |"
        )
    lines += ["", "Python calls per call (per replay, for the runner rows):", "", head, rule]
    for row in ROWS:
        cells = [workloads[n]["rows"][row] for n in names]
        lines.append(
            f"| {LABELS.get(row, row)} | "
            + " | ".join(
                _number(c["py_calls_per_call"])
                + (f" ({_number(c['py_calls_per_replay'])})" if c["py_calls_per_replay"] else "")
                for c in cells
            )
            + " |"
        )
    lines += ["", "Goals (differences: medians of the rounds' paired differences):", ""]
    lines += ["| goal | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key, label in GOAL_LABELS.items():
        lines.append(
            f"| {label} | "
            + " | ".join(_goal_cell(workloads[n]["goals"][key]) for n in names)
            + " |"
        )
    lines.append(
        "| npu_compile (emulated) - dynamo_trivial (both run the ops; no goal) | "
        + " | ".join(
            f"{workloads[n]['emulated_npu_compile_over_dynamo_trivial_us']:+.1f} µs" for n in names
        )
        + " |"
    )
    return "\n".join(lines)


def profile_markdown(results: dict[str, Any], top: int = 12) -> str:
    """``--profile``'s tables: per workload and pair, the functions that cost the difference."""
    lines = []
    for name, workload in results["workloads"].items():
        for pair, profile in workload.get("profile", {}).items():
            row, against = pair.split("_over_")
            totals = profile["cprofile_total_us_per_call"]
            lines += [
                "",
                f"**{name}**, {row} over {against}: {profile['measured_us_over']:+.1f} µs per "
                f"call measured; under cProfile {totals['row']:.1f} against "
                f"{totals['against']:.1f} µs",
                "",
                "| function (tottime) | cProfile µs / call more | scaled µs | frames / call more |",
                "|---|---:|---:|---:|",
            ]
            extra = profile["extra_frames_per_call"]
            scaled = profile["scaled_us_per_call_over"]
            for function, us in list(profile["cprofile_us_per_call_over"].items())[:top]:
                frames = next((n for f, n in extra.items() if f.endswith(function)), None)
                lines.append(
                    f"| `{function}` | {us:.2f} | {scaled[function]:.2f} | {_number(frames, 0)} |"
                )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for host_path.json")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--calls", type=int, default=200, help="calls per row and round")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument(
        "--frame-calls", type=int, default=50, help="calls over which Python frames are counted"
    )
    parser.add_argument("--profile", action="store_true", help="where npu_compile's time goes")
    parser.add_argument(
        "--warmup",
        type=float,
        default=30.0,
        help="seconds of calls of the first workload's rows before anything is measured",
    )
    parser.add_argument("--smoke", action="store_true", help="2 rounds of 5 calls: does it run")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.calls, args.frame_calls, args.warmup = 2, 5, 5, 0.0
    names = [name.strip() for name in args.workloads.split(",") if name.strip()]
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        parser.error(f"--workloads: unknown {unknown}; choose from {','.join(WORKLOADS)}")
    torch.set_num_threads(1)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": machine(),
        "rounds": args.rounds,
        "calls": args.calls,
        "frame_calls": args.frame_calls,
        "smoke": args.smoke,
        "graph_implementation": {
            "measured": "null (replay runs nothing)",
            "emulated rows": npu_mempool.graph_implementation("cpu"),
        },
        "unit": "us per call: median over rounds (spread: interquartile range)",
        "workloads": {},
    }
    results["warmup_seconds"] = warm_process(WORKLOADS[names[0]], args.warmup)
    for name in names:
        results["workloads"][name] = measure(
            WORKLOADS[name], args.rounds, args.calls, args.frame_calls, args.profile
        )
    if npu_mempool.graph_implementation("cpu") != results["graph_implementation"]["emulated rows"]:
        raise SystemExit("the CPU's graph backend was not restored after the null-graph rows")
    results["seconds"] = time.perf_counter() - started
    results["goals_met"] = all(
        goal["met"]
        for workload in results["workloads"].values()
        for goal in workload["goals"].values()
        if goal["met"] is not None
    )
    path = write_json(args.out / "host_path.json", results)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread, "
        f"{args.rounds} rounds of {args.calls} calls, commit {results['machine']['commit']}\n"
    )
    print(markdown(results))
    if args.profile:
        print(profile_markdown(results))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
