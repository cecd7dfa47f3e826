"""Capture sizes: pad a dynamic batch dimension up to a listed size, replay, slice back.

vLLM (``cudagraph_capture_sizes``) and SGLang (``--cuda-graph-bs``) capture a fixed list of batch
sizes and pad each batch up to the nearest one, so a serving loop whose batch size changes on
every step replays a few graphs instead of capturing one per size. Here the batch dimension is
the first dynamic dimension among the graph's tensor inputs (its symbol ``s``): every input
dimension equal to ``s`` is padded with zeros, every int argument equal to ``s`` is raised to
the padded size, and every output dimension ``c * s`` is sliced back to ``c * n``.

Padding is correct only when the rows of that dimension are independent: a padded row must not
change a real one. The plan is refused, with the node that shows it, where the graph reduces over
the batch dimension, contracts it in a matrix product, or updates an input in place that has it.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from npu_compile.errors import ConfigError

__all__ = ["Padding", "plan_padding"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]

aten = torch.ops.aten

#: Reductions and scans: their ``dim`` argument (position, default "all dims").
_DIM_OPS: dict[object, int] = {
    aten.sum.dim_IntList: 1,
    aten.mean.dim: 1,
    aten.amax.default: 1,
    aten.amin.default: 1,
    aten.max.dim: 1,
    aten.min.dim: 1,
    aten.argmax.default: 1,
    aten.argmin.default: 1,
    aten.prod.dim_int: 1,
    aten.var.correction: 1,
    aten.std.correction: 1,
    aten.logsumexp.default: 1,
    aten.any.dim: 1,
    aten.all.dim: 1,
    aten.cumsum.default: 1,
    aten.cumprod.default: 1,
    aten._softmax.default: 1,
    aten._log_softmax.default: 1,
    aten.sort.default: 1,
    aten.topk.default: 2,
    aten.var_mean.correction: 1,
    aten.linalg_vector_norm.default: 2,
}

#: Reductions over every element.
_FULL_OPS = frozenset(
    {
        aten.sum.default,
        aten.mean.default,
        aten.max.default,
        aten.min.default,
        aten.prod.default,
        aten.any.default,
        aten.all.default,
        aten.argmax.default,
        aten.argmin.default,
    }
)


@dataclasses.dataclass(frozen=True)
class Padding:
    """How one graph's calls are padded to the capture sizes and its outputs sliced back.

    Attributes:
        sizes: The capture sizes, ascending.
        tensor_dims: ``(argument, dimension)`` pairs that hold the batch size.
        int_args: Positions of int arguments equal to the batch size.
        output_dims: Per flat output, ``(dimension, factor)`` to slice, or ``None``.
        symbol: The batch size's symbol, for messages.
    """

    sizes: tuple[int, ...]
    tensor_dims: tuple[tuple[int, int], ...]
    int_args: tuple[int, ...]
    output_dims: tuple[tuple[int, int] | None, ...]
    symbol: str

    def batch(self, args: Sequence[Any]) -> int:
        if self.tensor_dims:
            arg, dim = self.tensor_dims[0]
            return int(args[arg].shape[dim])
        return int(args[self.int_args[0]])

    def pad(self, args: Sequence[Any], size: int) -> list[Any]:
        """The arguments with the batch size set to ``size``: zero rows added, or rows dropped.

        Dropping rows serves only the warm-up, which captures the smaller sizes from a larger
        first call (the rows are independent, so any of them will do).
        """
        padded = list(args)
        by_arg: dict[int, list[int]] = {}
        for arg, dim in self.tensor_dims:
            by_arg.setdefault(arg, []).append(dim)
        for arg, dims in by_arg.items():
            tensor = args[arg]
            for dim in dims:
                if tensor.shape[dim] > size:
                    tensor = tensor.narrow(dim, 0, size)
            shape = list(tensor.shape)
            for dim in dims:
                shape[dim] = size
            if shape != list(tensor.shape):
                grown = tensor.new_zeros(shape)
                grown[tuple(slice(0, n) for n in tensor.shape)] = tensor
                tensor = grown
            padded[arg] = tensor
        for arg in self.int_args:
            padded[arg] = size
        return padded

    def slice(self, outputs: Any, batch: int) -> Any:
        """The outputs cut back to ``batch`` rows, in place.

        In place (``as_strided_``), not as new views: each output stays the very tensor object
        the runner handed out, which it tracks to take the memory back after a step boundary.
        """
        flat = [outputs] if isinstance(outputs, torch.Tensor) else outputs
        for i, spec in enumerate(self.output_dims):
            if spec is not None and i < len(flat) and isinstance(flat[i], torch.Tensor):
                dim, factor = spec
                tensor = flat[i]
                if tensor.shape[dim] == factor * batch:
                    continue
                if tensor.untyped_storage().nbytes() == 0:
                    # An empty output is the runner's own static tensor, not a hand-out copy.
                    flat[i] = tensor.narrow(dim, 0, factor * batch)
                    continue
                shape = list(tensor.shape)
                shape[dim] = factor * batch
                tensor.as_strided_(shape, tensor.stride(), tensor.storage_offset())
        if isinstance(outputs, torch.Tensor):
            return flat[0]
        return type(outputs)(flat) if isinstance(outputs, tuple) else flat

    def wrap(self, runner: CompiledFn, eager: CompiledFn, name: str) -> CompiledFn:
        """The function Dynamo calls: pad, replay, slice; larger batches run ``eager``."""
        largest = self.sizes[-1]
        warmed: list[bool] = []
        told: set[int] = set()
        lock = threading.Lock()

        def padded(*args: Any) -> Any:
            batch = self.batch(args)
            if not warmed:
                with lock:
                    if not warmed:
                        self._warm_up(runner, args, name)
                        warmed.append(True)
            if batch > largest:
                if batch not in told:
                    told.add(batch)
                    logger.info(
                        "FX graph %s: batch size %d is larger than the largest capture size %d; "
                        "it runs eagerly",
                        name,
                        batch,
                        largest,
                    )
                return eager(*args)
            size = self.sizes[bisect.bisect_left(self.sizes, batch)]
            out = runner(*self.pad(args, size))
            return self.slice(out, batch)

        return padded

    def _warm_up(self, runner: CompiledFn, args: Sequence[Any], name: str) -> None:
        # Every size, largest first: the pool grows to the largest once and the smaller graphs
        # reuse it. Two calls per size: a device may ask for an eager warm-up call before it
        # captures a new shape.
        logger.info("FX graph %s: capturing batch sizes %s", name, list(reversed(self.sizes)))
        for size in reversed(self.sizes):
            for _ in range(2):
                runner(*self.pad(args, size))


# Symbols are sympy expressions (torch's dependency, not ours): used through their own methods.
Symbol = Any


def _symbols(value: object) -> set[Symbol]:
    if isinstance(value, torch.SymInt):
        return set(value.node.expr.free_symbols)
    return set()


def _plain_symbol(size: object) -> Symbol | None:
    """The symbol of a dynamic size that is a symbol alone (not ``2 * s0``), else ``None``."""
    if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
        return size.node.expr
    return None


def _dim_holds(size: object, symbol: Symbol) -> int | None:
    """The factor ``c`` where ``size == c * symbol``; ``None`` where it does not involve it."""
    if not isinstance(size, torch.SymInt):
        return None
    expr = size.node.expr
    if symbol not in expr.free_symbols:
        return None
    factor = expr / symbol  # sympy cancels the symbol of c * symbol
    if factor.is_Integer and int(factor) > 0:
        return int(factor)
    return -1  # involves the batch size in another way


def plan_padding(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    kinds: Sequence[Any],
    sizes: tuple[int, ...],
    name: str,
) -> Padding | None:
    """The padding plan of an AOT forward graph, or ``None`` where it has no dynamic dimension.

    Raises:
        ConfigError: The rows of the batch dimension are not independent in this graph, or a
            tensor holds the batch size in a way that cannot be padded.
    """
    from npu_mempool import InputKind

    symbol: Symbol | None = None
    for example in example_inputs:
        if isinstance(example, torch.Tensor):
            symbol = next((e for e in map(_plain_symbol, example.shape) if e is not None), None)
        if symbol is not None:
            break
    if symbol is None:
        return None

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"aclgraph_config.capture_sizes cannot pad FX graph {name}: {why}. Padding is "
            f"correct only where the rows of the batch dimension ({symbol}) are independent; "
            "leave capture_sizes unset for this model, or keep that computation out of the "
            "compiled region"
        )

    tensor_dims: list[tuple[int, int]] = []
    int_args: list[int] = []
    for i, value in enumerate(example_inputs):
        if isinstance(value, torch.Tensor):
            dims = [(d, _dim_holds(s, symbol)) for d, s in enumerate(value.shape)]
            held = [(d, f) for d, f in dims if f is not None]
            if not held:
                continue
            if kinds[i] is InputKind.MUTATED:
                raise refuse(f"input {i} holds the batch size and is updated in place")
            if any(f != 1 for _, f in held):
                raise refuse(f"input {i} has a dimension that combines the batch size")
            tensor_dims.extend((i, d) for d, _ in held)
        elif isinstance(value, torch.SymInt) and symbol in _symbols(value):
            if value.node.expr != symbol:
                raise refuse(f"int input {i} is {value.node.expr}, not the batch size itself")
            int_args.append(i)

    for node in gm.graph.nodes:
        if node.op == "call_function":
            why = _mixes_rows(node, symbol)
            if why is not None:
                raise refuse(f"node {node.name} ({node.target}) {why}")

    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    output_dims: list[tuple[int, int] | None] = []
    for value in output.args[0]:
        val = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
        spec: tuple[int, int] | None = None
        if isinstance(val, torch.Tensor):
            factors = [(d, _dim_holds(s, symbol)) for d, s in enumerate(val.shape)]
            found = [(d, f) for d, f in factors if f is not None]
            if len(found) > 1 or any(f < 1 for _, f in found):
                raise refuse(f"output {value} holds the batch size in more than one way")
            if found:
                spec = found[0]
        elif isinstance(val, torch.SymInt) and symbol in _symbols(val):
            raise refuse(f"output {value} is a size computed from the batch size")
        output_dims.append(spec)
    return Padding(
        sizes=sizes,
        tensor_dims=tuple(tensor_dims),
        int_args=tuple(int_args),
        output_dims=tuple(output_dims),
        symbol=str(symbol),
    )


def _val(arg: object) -> object:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None


def _has(size: object, symbol: Symbol) -> bool:
    return isinstance(size, torch.SymInt) and symbol in size.node.expr.free_symbols


def _mixes_rows(node: torch.fx.Node, symbol: Symbol) -> str | None:
    """Why this node lets one row of the batch dimension change another, or ``None``."""
    target = node.target
    source = _val(node.args[0]) if node.args else None
    if not isinstance(source, torch.Tensor):
        return None
    shape = source.shape
    if target in _FULL_OPS and any(_has(s, symbol) for s in shape):
        return "reduces over every element, the batch dimension included"
    if target in _DIM_OPS:
        position = _DIM_OPS[target]
        dims: Any = node.args[position] if len(node.args) > position else node.kwargs.get("dim")
        if dims is None:
            reduced: Sequence[int] = range(len(shape))
        else:
            listed = dims if isinstance(dims, (list, tuple)) else [dims]
            reduced = [int(d) % max(len(shape), 1) for d in listed]
        if any(_has(shape[d], symbol) for d in reduced):
            return "reduces over the batch dimension"
    if target in (aten.mm.default, aten.bmm.default, aten.addmm.default):
        left, right = (
            (node.args[1], node.args[2]) if target is aten.addmm.default else node.args[:2]
        )
        lval, rval = _val(left), _val(right)
        if (
            isinstance(lval, torch.Tensor)
            and isinstance(rval, torch.Tensor)
            and (_has(lval.shape[-1], symbol) or _has(rval.shape[-2], symbol))
        ):
            return "contracts the batch dimension in a matrix product"
    return None
