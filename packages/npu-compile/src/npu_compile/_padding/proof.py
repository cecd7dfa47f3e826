"""The padding proof: every output row depends only on the same row of the inputs.

Padding a batch of ``b`` rows up to a capture size ``P`` and cutting the outputs back to ``b``
rows is correct exactly when output row ``i < b`` is computed from row ``i`` of the inputs that
hold the batch, and from values that do not depend on the batch at all. :func:`prove` walks the
AOT forward graph once, in order, and gives every tensor one of two states:

* *free* (``None``): neither its shape nor its values involve the batch size ``B`` (weights,
  constants, rotary tables computed from the sequence length);
* :class:`Rows`: exactly one dimension has size ``B * g``, with the batch as its leading factor
  (row ``i`` is the ``g`` entries ``i*g .. i*g + g - 1``), and those entries depend only on row
  ``i`` of the inputs.

Which dimension holds the batch follows from the value's symbolic shape (the one dimension whose
size involves ``B``); the rules of :mod:`npu_compile._padding.rules` check, per op, that the op
keeps rows apart. Anything they do not know fails the proof at that node, with the reason:
:class:`Unproven`. A size computed from ``B`` may feed a view's shape, a factory's size, the end
of an ``arange`` and the like, where the rules allow it; anywhere else (``x * B``) it changes
values with the padding and fails the proof too.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

__all__ = ["BatchInt", "Proof", "Rows", "SliceRows", "Unproven", "prove"]

# Sizes are sympy expressions (torch's dependency, not ours): used through their own methods.
Expr = Any
Node = torch.fx.Node


@dataclasses.dataclass(frozen=True)
class Rows:
    """A tensor that holds the batch in dimension ``dim``, its rows kept apart.

    The dimension is the row-major merge of ``(outer, B, g)``: row ``i`` is the entries
    ``x * B * g + i * g + j``. ``outer`` is 1 where the batch is the leading factor (the only
    layout an output can be cut back from); a ``Linear`` on ``(seq, batch, hidden)`` merges
    ``(seq, batch)`` into one dimension with ``outer = seq``, which keeps rows apart all the same.

    Attributes:
        dim: The dimension whose size is ``outer * B * g``.
        outer: The size of the part of the dimension before the batch.
        coord: Its values are computed from the position of the row in the batch (``arange``
            over the batch): the padded rows hold positions no real row has.
        identity: Its value is the row's own position (``arange(B)`` and views of it), which
            makes it a safe index into the batch dimension.
        const: The values are the same all along the batch dimension (a constant, or a free
            tensor expanded to the batch), so it combines with a batch of any layout.
    """

    dim: int
    outer: Expr = 1
    coord: bool = False
    identity: bool = False
    const: bool = False


@dataclasses.dataclass(frozen=True)
class Multi:
    """An op with several outputs, each holding the batch (or not) as its shape says."""

    outer: Expr = 1
    coord: bool = False


State = Rows | Multi | None
#: The rule of an ATen op, or ``None`` where no rule knows it (``_batch_rules.rule_for``);
#: passed in, so that the rules may build on this module without a circle.
Rules = Callable[[torch._ops.OpOverload], "Rule | None"]


@dataclasses.dataclass(frozen=True)
class SliceRows:
    """A graph output that holds the batch in dimension ``dim``: cut back to the real rows."""

    dim: int


@dataclasses.dataclass(frozen=True)
class BatchInt:
    """A graph output that is the int ``scale * B + offset``: recomputed for the real batch."""

    scale: int
    offset: int


@dataclasses.dataclass(frozen=True)
class Proof:
    """What the proof found: how each output is cut back, and bounds on the padded size.

    Attributes:
        outputs: Per flat graph output, how to cut it back (``None``: as it is).
        bounds: Relations on ``B`` every padded size must satisfy (an ``arange`` over the batch
            used as an index into a table of fixed size).
    """

    outputs: tuple[SliceRows | BatchInt | None, ...]
    bounds: tuple[Expr, ...]


class Unproven(Exception):
    """The proof fails at ``node``: ``why`` says how the rows may mix there."""

    def __init__(self, node: Node, why: str) -> None:
        super().__init__(f"node {node.name} ({op_name(node)}) {why}")
        self.node = node
        self.why = why


def op_name(node: Node) -> str:
    """The op of a node as the user reads it in a graph dump (``aten.flip.default``)."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))


def expr_of(size: object) -> Expr:
    """A size as a sympy expression or an int."""
    if isinstance(size, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return size.node.expr
    return size


def same(a: object, b: object) -> bool:
    """Whether two sizes are equal for every value of their symbols."""
    difference = expr_of(a) - expr_of(b)
    if isinstance(difference, int):
        return difference == 0
    return bool(difference.expand() == 0)


def product(sizes: Sequence[object]) -> Expr:
    """The product of sizes (``1`` for none)."""
    result: Expr = 1
    for size in sizes:
        result = result * expr_of(size)
    return result


def schema_arg(node: Node, name: str, default: object = None) -> Any:
    """The argument ``name`` of an ATen node, positional or keyword, or its schema default."""
    target = node.target
    assert isinstance(target, torch._ops.OpOverload)
    for position, argument in enumerate(target._schema.arguments):
        if argument.name != name:
            continue
        if position < len(node.args) and not argument.kwarg_only:
            return node.args[position]
        if name in node.kwargs:
            return node.kwargs[name]
        return argument.default_value if argument.has_default_value() else default
    return default


def _named_args(node: Node) -> Iterator[tuple[str, object]]:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        names = [argument.name for argument in target._schema.arguments]
        for position, value in enumerate(node.args):
            yield (names[position] if position < len(names) else str(position)), value
    else:
        for position, value in enumerate(node.args):
            yield str(position), value
    yield from node.kwargs.items()


def _nodes_in(value: object) -> Iterator[Node]:
    if isinstance(value, Node):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _nodes_in(item)


class Prover:
    """The walk over one graph: the state of every node so far, and what the rules need."""

    def __init__(self, symbol: Expr, rules: Rules) -> None:
        self.symbol = symbol
        self.rules = rules
        self.states: dict[Node, State] = {}
        self.bounds: list[Expr] = []
        #: Placeholders and views of them: writing one changes the caller's state.
        self.inputs: set[Node] = set()

    # -- shapes --------------------------------------------------------------------------------

    def val(self, node: object) -> Any:
        return node.meta.get("val") if isinstance(node, Node) else None

    def involves(self, value: object) -> bool:
        expr = expr_of(value)
        return not isinstance(expr, (int, float, bool)) and self.symbol in expr.free_symbols

    def factor(self, size: object) -> Expr | None:
        """``g`` where ``size == B * g`` for every ``B``; ``None`` where it is not a multiple."""
        ratio = (expr_of(size) / self.symbol).expand()
        return None if self.symbol in ratio.free_symbols else ratio

    def batch_dim(self, node: Node, val: object = None) -> int | None:
        """The one dimension of a tensor value whose size involves the batch, if any."""
        val = self.val(node) if val is None else val
        if not isinstance(val, torch.Tensor):
            raise Unproven(node, "has no tensor shape recorded to follow the batch through")
        dims = [d for d, size in enumerate(val.shape) if self.involves(size)]
        if not dims:
            return None
        if len(dims) > 1:
            raise Unproven(node, "holds the batch size in more than one dimension")
        if self.factor(val.shape[dims[0]]) is None:
            size = expr_of(val.shape[dims[0]])
            raise Unproven(node, f"has a dimension of size {size}, not a multiple of the batch")
        return dims[0]

    def unit(self, size: object) -> bool:
        """Whether a dimension is the batch itself (``outer == g == 1``)."""
        return same(size, self.symbol)

    # -- states --------------------------------------------------------------------------------

    def rows(self, node: object) -> Rows | None:
        """The state of a tensor argument: :class:`Rows`, or ``None`` when it is free."""
        if not isinstance(node, Node):
            return None
        state = self.states.get(node)
        if isinstance(state, Multi):
            raise Unproven(node, "is used as one tensor but holds several")
        return state

    def tensor_args(self, node: Node) -> list[Node]:
        return [
            n
            for _, value in _named_args(node)
            for n in _nodes_in(value)
            if isinstance(self.val(n), torch.Tensor)
        ]

    def no_batch_values(self, node: Node, allow: Sequence[str] = ()) -> None:
        """Fail where a size computed from the batch is used as a value (``x * B``).

        ``allow`` names the arguments where such a size only shapes the result (a view's size).
        """
        for name, value in _named_args(node):
            if name in allow:
                continue
            for arg in _nodes_in(value):
                val = self.val(arg)
                if not isinstance(val, torch.Tensor) and self.involves(val):
                    raise Unproven(
                        node, f"uses a size computed from the batch size as a value ({name})"
                    )

    def merge(self, node: Node, states: Sequence[Rows | None]) -> Rows:
        """What several inputs' batches make together; they must share one layout."""
        held = [state for state in states if state is not None]
        laid = [state for state in held if not state.const]
        for state in laid[1:]:
            if not same(state.outer, laid[0].outer):
                raise Unproven(node, "combines batches laid out in different ways")
        return Rows(
            dim=-1,
            outer=laid[0].outer if laid else 1,
            coord=any(state.coord for state in held),
            const=not laid,
        )

    def broadcast_into(self, node: Node, out: int | None, inputs: Sequence[object]) -> Rows:
        """Check inputs broadcast into an output whose batch dimension is ``out``."""
        val = self.val(node)
        states = []
        for arg in inputs:
            state = self.rows(arg)
            if state is None:
                continue  # free: the same values broadcast to every row
            arg_val = self.val(arg)
            if (
                out is None
                or state.dim - arg_val.dim() != out - val.dim()
                or not same(arg_val.shape[state.dim], val.shape[out])
            ):
                raise Unproven(node, "broadcasts the batch dimension against another dimension")
            states.append(state)
        return self.merge(node, states)

    def index_bound(self, node: Node, index: object, size: object) -> None:
        """An index into a dimension of fixed ``size``: positions in the batch must stay in it."""
        state = self.rows(index)
        if state is None or not state.coord:
            return  # padded rows repeat a real row's index, which is in range
        if not state.identity:
            raise Unproven(node, "indexes with values computed from the position in the batch")
        self.bounds.append(self.symbol <= expr_of(size))

    # -- the walk ------------------------------------------------------------------------------

    def step(self, node: Node) -> State:
        target = node.target
        val = self.val(node)
        if target is operator.getitem:
            return self._getitem(node)
        tensors = self.tensor_args(node)
        held = any(self.states.get(t) is not None for t in tensors)
        if not isinstance(target, torch._ops.OpOverload):
            # Python arithmetic on sizes (Dynamo's ``mul(s0, s1)``) is checked where it is
            # used; anything else must not touch the batch.
            arithmetic = not _holds_tensor(val)
            if not held and (arithmetic or not self._touches_batch(node, val)):
                return None
            raise Unproven(node, "is not an ATen op the padding rules know")
        self._check_writes(node)
        if target is torch.ops.aten._assert_scalar.default:
            condition = self.val(node.args[0])
            if self.involves(condition):
                self.bounds.append(expr_of(condition))
            return None
        if not _holds_tensor(val):
            # Ops that return nothing and write nothing (stream events, metadata checks) and
            # ops that read only sizes cannot carry one row into another.
            if not held or target in _METADATA or not target._schema.returns:
                return None
            raise Unproven(node, "reads values of the batch rows back as a number")
        if not held and not self._touches_batch(node, val):
            return None  # nothing about it depends on the batch: any op is fine
        rule = self.rules(target)
        if rule is None:
            raise Unproven(node, "is not known to keep the rows of the batch apart")
        # Attention is tagged random for its dropout, which its rule checks is off.
        if torch.Tag.nondeterministic_seeded in target.tags and not any(
            argument.name == "dropout_p" for argument in target._schema.arguments
        ):
            raise Unproven(node, "draws random numbers for the batch rows")
        return rule(self, node)

    def _touches_batch(self, node: Node, val: object) -> bool:
        """Whether the batch size shapes the result or enters as an argument."""
        return self._shape_involves(val) or self._uses_batch(node)

    def _shape_involves(self, val: object) -> bool:
        return any(
            self.involves(size)
            for tensor in _tensors(val)
            for size in (*tensor.shape, *tensor.stride())
        )

    def _uses_batch(self, node: Node) -> bool:
        return any(
            self.involves(self.val(arg))
            for _, value in _named_args(node)
            for arg in _nodes_in(value)
            if not isinstance(self.val(arg), torch.Tensor)
        )

    def _getitem(self, node: Node) -> State:
        source = node.args[0]
        state = self.states.get(source) if isinstance(source, Node) else None
        if isinstance(source, Node) and source in self.inputs:
            self.inputs.add(node)
        if state is None:
            return None
        if not isinstance(state, Multi):
            raise Unproven(node, "takes an item of a single tensor")
        dim = self.batch_dim(node)
        return None if dim is None else Rows(dim, state.outer, state.coord)

    def _check_writes(self, node: Node) -> None:
        target = node.target
        assert isinstance(target, torch._ops.OpOverload)
        schema = target._schema
        if not schema.is_mutable:
            if target.is_view and any(arg in self.inputs for arg in self.tensor_args(node)):
                self.inputs.add(node)
            return
        for name, value in _named_args(node):
            argument = next((a for a in schema.arguments if a.name == name), None)
            if argument is None or argument.alias_info is None or not argument.alias_info.is_write:
                continue
            for arg in _nodes_in(value):
                if arg in self.inputs:
                    raise Unproven(node, f"writes the graph input {arg.name} in place")
        # AOT's graph is functional here (reinplacing comes later): an in-place write comes
        # from a user pass, and whatever aliases the written tensor would need following too.
        raise Unproven(node, "writes a tensor in place")

    def outputs(self, output: Node) -> Proof:
        results = output.args[0]
        flat = results if isinstance(results, (list, tuple)) else [results]
        specs: list[SliceRows | BatchInt | None] = []
        for value in flat:
            val = self.val(value)
            spec: SliceRows | BatchInt | None = None
            if isinstance(value, Node) and isinstance(val, torch.Tensor):
                state = self.rows(value)
                if state is not None and not state.const and not same(state.outer, 1):
                    raise Unproven(value, "is returned with the batch inside a merged dimension")
                spec = None if state is None else SliceRows(state.dim)
            elif self.involves(val):
                spec = self._batch_int(output, val)
            specs.append(spec)
        return Proof(tuple(specs), tuple(self.bounds))

    def _batch_int(self, output: Node, val: object) -> BatchInt:
        expr = expr_of(val).expand()
        scale = expr.coeff(self.symbol)
        offset = expr - scale * self.symbol
        if (
            isinstance(val, torch.SymInt)
            and scale.is_Integer
            and offset.is_Integer
            and int(scale) != 0
        ):
            return BatchInt(int(scale), int(offset))
        raise Unproven(output, f"returns {expr}, a number computed from the batch size")


#: Ops that read only a tensor's metadata.
_METADATA = frozenset(
    {
        torch.ops.aten.sym_size.int,
        torch.ops.aten.sym_stride.int,
        torch.ops.aten.sym_numel.default,
        torch.ops.aten.sym_storage_offset.default,
    }
)


#: A padding rule: the state of ``node`` from its inputs' states, or :class:`Unproven`.
Rule = Callable[[Prover, Node], State]


def result_state(prover: Prover, node: Node, state: Rows, identity: bool = False) -> State:
    """The state of an op that keeps its input's batch layout: several outputs, or one."""
    val = prover.val(node)
    if isinstance(val, (list, tuple)):
        return Multi(state.outer, state.coord)
    dim = prover.batch_dim(node)
    if dim is None:
        return None
    return dataclasses.replace(state, dim=dim, identity=identity)


def listed(value: object) -> list[Any]:
    """A list argument of a node (``cat``'s tensors, ``index``'s indices)."""
    assert isinstance(value, (list, tuple))
    return list(value)


def source_rows(prover: Prover, node: Node) -> Rows:
    """The first argument's state, which the rule needs to hold the batch."""
    state = prover.rows(node.args[0])
    if state is None:
        raise Unproven(node, "makes a batch dimension out of values that have none")
    return state


def _tensors(val: object) -> Iterator[torch.Tensor]:
    if isinstance(val, torch.Tensor):
        yield val
    elif isinstance(val, (list, tuple)):
        for item in val:
            yield from _tensors(item)


def _holds_tensor(val: object) -> bool:
    return next(_tensors(val), None) is not None


def prove(gm: torch.fx.GraphModule, symbol: Expr, inputs: Sequence[State], rules: Rules) -> Proof:
    """Prove that the rows of the batch stay apart in ``gm``; raise :class:`Unproven` if not.

    Args:
        gm: The AOT forward graph.
        symbol: The batch size's symbol ``B``.
        inputs: The state of each placeholder (:class:`Rows` where the input holds the batch).
        rules: The rule of an ATen op (``_batch_rules.rule_for``), ``None`` for an unknown op.
    """
    prover = Prover(symbol, rules)
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    for node, state in zip(placeholders, inputs, strict=True):
        prover.states[node] = state
        prover.inputs.add(node)
    for node in gm.graph.nodes:
        if node.op == "call_function":
            prover.states[node] = prover.step(node)
        elif node.op == "get_attr":
            prover.states[node] = None  # a constant of the module: no symbolic size
        elif node.op == "output":
            return prover.outputs(node)
        elif node.op != "placeholder":
            raise Unproven(node, f"is a {node.op} node, which the padding rules do not know")
    raise AssertionError("a graph without an output node")
