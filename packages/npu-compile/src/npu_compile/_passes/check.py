"""The differential check of npu-compile's graph passes (``debug.aclgraph.check_passes``).

A pass may change how a graph computes, never what: reinplacing writes a result into memory
nothing reads later, no-op removal drops ops that return their input, the stream pass adds
events, int inputs become device scalars. Where the proof behind one of them is wrong, the graph
returns other numbers and nothing says so. With the option on, the backend keeps a copy of the
AOT graph before each of its passes (:class:`PassTrail`) and, at the graph's first call, runs
every copy on clones of the call's inputs, each after the same random seed. Consecutive copies
must give the same outputs and leave the inputs they mutate the same; the first pass after
which they do not is named in a :class:`~npu_compile.errors.PassCheckError`, with the first
node whose value differs. A user's own passes (``post_grad_custom_*_pass``) start a new
comparison: only npu-compile's passes are checked.

A debugging aid: every graph runs once more per pass at its first call, and the copies hold
the graph's constants.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from npu_compile.errors import PassCheckError

__all__ = ["PassTrail", "checked"]

#: Runs one copy of the graph: the call's arguments in, its output values out.
Runner = Callable[[Sequence[Any]], Sequence[Any]]


@dataclasses.dataclass
class _Snapshot:
    label: str  # the pass that made this graph ("" for a start of a comparison)
    gm: torch.fx.GraphModule
    adapt: Callable[[Callable[..., Any]], Callable[..., Any]] | None  # calling convention


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    return torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))


class PassTrail:
    """Copies of one graph before and after each of npu-compile's passes, in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._chains: list[list[_Snapshot]] = []

    def start(self, gm: torch.fx.GraphModule) -> None:
        """Begin a comparison at ``gm`` (the graph as AOT gave it, or as a user pass left it)."""
        self._chains.append([_Snapshot("", _copy(gm), None)])

    def after(
        self,
        label: str,
        gm: torch.fx.GraphModule,
        adapt: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
    ) -> None:
        """Record ``gm`` as pass ``label`` left it.

        Args:
            label: The pass, as the error names it.
            gm: The graph after it.
            adapt: Where the pass changed the graph's calling convention (ints become 0-d
                tensors), what turns the graph's forward back into one taking the call's
                arguments. Later copies keep it.
        """
        if not self._chains:
            self.start(gm)
            return
        chain = self._chains[-1]
        if adapt is None:
            adapt = chain[-1].adapt
        chain.append(_Snapshot(label, _copy(gm), adapt))

    def check(self, args: Sequence[Any]) -> None:
        """Run every copy on clones of ``args``; raise at the first pass that changed a value.

        Raises:
            PassCheckError: A pass changed an output or a mutated input; the message names it
                and the first node whose value differs.
        """
        for chain in self._chains:
            reference: tuple[_Snapshot, list[Any]] | None = None
            for snapshot in chain:
                values = _run(snapshot, args)
                if reference is not None:
                    before, expected = reference
                    index = _first_difference(expected, values)
                    if index is not None:
                        raise PassCheckError(self._explain(before, snapshot, args, index))
                reference = (snapshot, values)

    def _explain(self, before: _Snapshot, after: _Snapshot, args: Sequence[Any], index: int) -> str:
        outputs = _output_nodes(after.gm)
        if index < len(outputs):
            node = outputs[index]
            what = f"output {index} ({node.name if node is not None else 'a constant'})"
        else:
            what = f"graph input {index - len(outputs)} as the call leaves it"
        first = _first_node_that_differs(before, after, args)
        if first:
            where = f"the first node whose value differs is {first}"
        else:
            # Every value was right when it was made: something wrote over it later.
            culprit = _overwriter(after, args, outputs[index]) if index < len(outputs) else ""
            where = "every node's value is right when made, so it was overwritten later" + (
                f", by {culprit}" if culprit else ""
            )
        return (
            f"FX graph {self.name}: the pass {after.label} changed what the graph computes: "
            f"{what} differs; {where}. Turn that pass off (for the reinplace passes: "
            "debug.aclgraph.disable_reinplace_inplaceable_ops_pass or "
            "disable_reinplace_input_mutated_ops_pass) and report the graph"
        )


def _output_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node | None]:
    output = next(node for node in gm.graph.nodes if node.op == "output")
    results = output.args[0]
    flat = list(results) if isinstance(results, (tuple, list)) else [results]
    return [value if isinstance(value, torch.fx.Node) else None for value in flat]


def checked(function: Callable[..., Any], trail: PassTrail) -> Callable[..., Any]:
    """``function`` that checks ``trail`` on its first call's arguments, then runs as before."""
    boxed = bool(getattr(function, "_boxed_call", False))
    pending = [True]

    def first(args: Sequence[Any]) -> None:
        if pending:
            pending.clear()
            trail.check(args)

    if boxed:

        def call_boxed(args: list[Any]) -> Any:
            first(args)
            return function(args)

        call_boxed._boxed_call = True  # type: ignore[attr-defined]
        return functools.update_wrapper(call_boxed, function)

    def call(*args: Any) -> Any:
        first(args)
        return function(*args)

    return functools.update_wrapper(call, function)


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    return value


def _run(snapshot: _Snapshot, args: Sequence[Any]) -> list[Any]:
    """The outputs of one copy on clones of ``args``, then the clones (mutated in place)."""
    given = [_clone(a) for a in args]
    forward: Callable[..., Any] = snapshot.gm.forward
    if snapshot.adapt is not None:
        forward = snapshot.adapt(forward)
    with torch.random.fork_rng(devices=_devices(given)), torch.no_grad():
        torch.manual_seed(0)
        out = forward(*given)
    flat = list(out) if isinstance(out, (list, tuple)) else [out]
    return [_clone(v) for v in flat] + given


def _devices(values: Sequence[Any]) -> list[int]:
    return sorted(
        {
            v.device.index or 0
            for v in values
            if isinstance(v, torch.Tensor) and v.device.type == "cuda"
        }
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        try:
            torch.testing.assert_close(b, a, equal_nan=True)
        except AssertionError:
            return False
        return True
    return bool(a == b) if not isinstance(a, torch.Tensor) else False


def _first_difference(expected: list[Any], got: list[Any]) -> int | None:
    """The index of the first value that differs (outputs, then the inputs after the call)."""
    if len(expected) != len(got):
        return min(len(expected), len(got))
    for index, (a, b) in enumerate(zip(expected, got, strict=True)):
        if not _same(a, b):
            return index
    return None


class _Recorder(torch.fx.Interpreter):
    """Runs a graph, keeping a copy of every tensor value as it is made.

    With ``watch``, also the first node after which the value of the node ``watch`` changed.
    """

    def __init__(self, gm: torch.fx.GraphModule, watch: str | None = None) -> None:
        super().__init__(gm)
        self.values: dict[str, Any] = {}
        self.watch = watch
        self.watched: torch.Tensor | None = None
        self.overwriter = ""

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if isinstance(result, torch.Tensor):
            self.values[n.name] = result.detach().clone()
            if n.name == self.watch:
                self.watched = result
        watch, watched = self.watch, self.watched
        if (
            watch is not None
            and watched is not None
            and not self.overwriter
            and n.name != watch
            and not _same(self.values[watch], watched)
        ):
            self.overwriter = f"{n.name} ({n.format_node()})"
        return result


def _recorded(snapshot: _Snapshot, args: Sequence[Any], watch: str | None = None) -> _Recorder:
    recorder = _Recorder(snapshot.gm, watch)
    given = [_clone(a) for a in args]

    def interpret(*inputs: Any) -> Any:
        return recorder.run(*inputs)

    run = snapshot.adapt(interpret) if snapshot.adapt is not None else interpret
    with torch.random.fork_rng(devices=_devices(given)), torch.no_grad():
        torch.manual_seed(0)
        run(*given)
    return recorder


def _overwriter(after: _Snapshot, args: Sequence[Any], node: torch.fx.Node | None) -> str:
    """The first node of ``after`` that changed ``node``'s value once it was made."""
    if node is None:
        return ""
    try:
        return _recorded(after, args, watch=node.name).overwriter
    except Exception:  # only for the message, as in _first_node_that_differs
        return ""


def _first_node_that_differs(before: _Snapshot, after: _Snapshot, args: Sequence[Any]) -> str:
    """The first node of ``after`` (in graph order) whose value differs from ``before``'s."""
    try:
        old, new = _recorded(before, args).values, _recorded(after, args).values
    except Exception:  # the graphs ran as modules; the node-by-node run is only for the message
        return ""
    for node in after.gm.graph.nodes:
        if node.name in old and node.name in new and not _same(old[node.name], new[node.name]):
            return f"{node.name} ({node.format_node()})"
    return ""
