"""Whether an FX graph can be captured into a device graph, and if not, why."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "HOST_SYNC_OPS",
    "TRAINING_REASON",
    "devices",
    "external_state_reason",
    "host_sync_reason",
    "called_op",
    "op_name",
    "op_tags",
    "records_autograd",
    "storage_read_reason",
    "uncapturable_reason",
    "unsafe_tag",
]


def devices(example_inputs: Sequence[object]) -> set[str]:
    return {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}


def uncapturable_reason(gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> str | None:
    """Return why this Dynamo graph cannot be captured, or ``None`` if it can."""
    types = devices(example_inputs)
    if len(types) > 1:
        return (
            f"its inputs live on several device types ({', '.join(sorted(types))}); a device "
            "graph runs on one device: move every input to the same device"
        )
    return None


#: Why a training graph (AOT traced it for autograd: an output requires grad) is not captured.
#: Training graphs are captured, forward and backward (``_training``), except while torch's AOT
#: compile saves the graph: the saved artifact holds one forward graph (``_artifact``), not the
#: backward graph a training graph needs as well.
TRAINING_REASON = (
    "autograd records this graph (an output requires grad) and torch's AOT compile is saving "
    "it: a saved npu-compile artifact holds a forward graph, not the backward graph training "
    "also needs; compile the training step without aot_compile (training graphs are captured "
    "then), or save the model for inference under torch.no_grad()"
)


def records_autograd(meta: Any, grad_enabled: bool) -> bool:
    """Whether AOT traced a training graph: grad was on and some output requires grad."""
    return grad_enabled and any(
        getattr(info, "requires_grad", False) for info in getattr(meta, "output_info", ())
    )


def host_sync_reason(fw_gm: torch.fx.GraphModule) -> str | None:
    """Ops that read device values on the host cannot be recorded into a device graph."""
    for node in fw_gm.graph.nodes:
        if node.op == "call_function" and node.target in HOST_SYNC_OPS:
            return (
                f"node {node.name} ({node.target}) reads a tensor value on the host, which a "
                "device graph cannot capture; keep the value on the device or move the read "
                "out of the compiled region"
            )
    return None


HOST_SYNC_OPS: frozenset[object] = frozenset(
    {
        torch.ops.aten._local_scalar_dense.default,
        torch.ops.aten.nonzero.default,
        torch.ops.aten.item.default,
    }
)


#: Ops that address an input's storage directly, by offset and strides of their own.
_STORAGE_VIEWS = frozenset({"as_strided", "as_strided_", "as_strided_copy", "as_strided_scatter"})
#: The most elements whose addresses are compared one by one to prove a read stays inside an
#: input (compile time only).
_ADDRESS_LIMIT = 1 << 22


def storage_read_reason(
    gm: torch.fx.GraphModule, copied: Sequence[bool], example_inputs: Sequence[object]
) -> str | None:
    """Why the graph reads a copied input's memory that its static copy does not hold.

    A copied input (a USER input, whose values the runner copies into a static buffer of the
    caller's strides) holds the input's elements and nothing else: not the gaps of a slice, not
    the memory around it, and its storage begins at the first element (offset 0). ``as_strided``
    addresses storage itself. On the input (or a view of it) it is right on the copy only when it
    reads the input's own elements, at an offset relative to it (no explicit ``storage_offset``
    unless the input starts its storage). Anything else would read other memory on replay and
    give another number than eager, so such a graph is not captured.
    """
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    for node, copy, example in zip(placeholders, copied, example_inputs, strict=False):
        if not copy or not isinstance(example, torch.Tensor):
            continue
        stack, seen = [node], {node}
        while stack:
            current = stack.pop()
            for user in current.users:
                op = user.target
                if not isinstance(op, torch._ops.OpOverload) or not user.args:
                    continue
                if user.args[0] is not current or user in seen:
                    continue
                if op_name(op).removeprefix("aten::") in _STORAGE_VIEWS:
                    problem = _outside(example, user)
                    if problem is not None:
                        what = problem.format(input=f"input {node.name}")
                        return (
                            f"node {user.name} ({op}) {what}, which the "
                            "static copy a captured graph reads does not hold; pass the input "
                            "contiguous, or index it instead of using as_strided"
                        )
                elif op.is_view:
                    seen.add(user)
                    stack.append(user)
    return None


def _outside(example: torch.Tensor, node: torch.fx.Node) -> str | None:
    """What ``node`` (an ``as_strided`` of ``example`` or of a view of it) reads outside it.

    The answer names the input as ``{input}``.
    """
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return "reads memory of {input} that cannot be shown to be its elements"
    layouts = [
        (example.shape, example.stride(), example.storage_offset()),
        (value.shape, value.stride(), value.storage_offset()),
    ]
    explicit = len(node.args) > 3 and node.args[3] is not None
    if any(
        not isinstance(v, int)
        for shape, stride, offset in layouts
        for v in (*shape, *stride, offset)
    ):
        if not explicit and _dense_read_inside(example, value):
            return None
        return "reads {input} through a symbolic layout, which cannot be shown to stay inside it"
    if explicit and example.storage_offset() != 0:
        return "addresses {input} at a fixed storage offset, where its copy starts elsewhere"
    if value.numel() == 0:
        return None
    if value.numel() > _ADDRESS_LIMIT or example.numel() > _ADDRESS_LIMIT:
        return "reads more of {input} than can be compared element by element"
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    # Called while AOT traces under its fake mode: these index tensors must be real.
    with unset_fake_temporarily():
        read, own = (
            _addresses(shape, stride, int(offset)) for shape, stride, offset in reversed(layouts)
        )
        inside = bool(torch.isin(read, own).all())
    return None if inside else "reads memory between or around the elements of {input}"


def _dense_read_inside(example: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether a read of a dense input stays inside it, for every size its symbols may take.

    A dense (row-major, gap-free) input owns every storage index from its offset to its offset
    plus its element count: a read whose strides are not negative stays inside it exactly when
    its first index is at least the input's offset and its last one at most the input's last.
    The sizes are symbols (a graph traced for many sizes); each comparison must hold for all of
    them (``statically_known_true``, which adds no guard), else the read is not shown inside.
    Sliding windows over a dense input (Longformer's chunks) are such reads.
    """
    from torch.fx.experimental.symbolic_shapes import statically_known_true as always

    numel: Any = 1
    for size, step in reversed(list(zip(example.shape, example.stride(), strict=True))):
        if not (always(size == 1) or always(step == numel)):
            return False
        numel = numel * size
    start: Any = example.storage_offset()
    first: Any = value.storage_offset()
    last: Any = first
    for size, step in zip(value.shape, value.stride(), strict=True):
        if not always(step >= 0):
            return False
        last = last + (size - 1) * step
    return always(first >= start) and always(last <= start + numel - 1)


def _addresses(shape: Sequence[int], stride: Sequence[int], offset: int) -> torch.Tensor:
    """Every storage index a layout reaches."""
    index = torch.tensor([offset], dtype=torch.int64)
    for size, step in zip(shape, stride, strict=True):
        index = (index[:, None] + torch.arange(size, dtype=torch.int64) * step).reshape(-1)
    return index


def op_name(target: object) -> str:
    """``namespace::name`` of an operator (an overload or a packet); ``""`` for anything else."""
    schema = getattr(target, "_schema", None)  # an OpOverload
    if schema is not None:
        return str(schema.name)
    return str(getattr(target, "_qualified_op_name", ""))  # an OpOverloadPacket


#: Higher-order ops that call another op, and where it sits among their arguments: AOT autograd
#: wraps an op that writes into an argument (``mutates_args``, such as an attention op with an
#: output buffer) in ``auto_functionalized`` (``_v2`` since torch 2.6), and an op with effects
#: in ``with_effects(token, op, ...)``.
_WRAPPERS = {"auto_functionalized": 0, "auto_functionalized_v2": 0, "with_effects": 1}


def called_op(node: torch.fx.Node) -> object:
    """The operator ``node`` runs: its target, or the op a functionalization wrapper calls.

    A split, unsafe-tag or name rule that looked only at the target would miss every op that
    writes into an argument: the graph calls it through ``auto_functionalized_v2``.
    """
    target = node.target
    if isinstance(target, torch._ops.HigherOrderOperator):
        position = _WRAPPERS.get(target.name())  # type: ignore[no-untyped-call]
        if position is not None and len(node.args) > position:
            inner = node.args[position]
            if isinstance(inner, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                return inner
    return target


def op_tags(target: object) -> tuple[object, ...]:
    """The ``torch.Tag`` s of an operator (of any overload, for a packet)."""
    tags = getattr(target, "tags", None)  # an OpOverload
    if tags is not None:
        return tuple(tags)
    overloads = getattr(target, "overloads", None)  # an OpOverloadPacket: any of its overloads
    if not callable(overloads):
        return ()
    return tuple(tag for overload in overloads() for tag in getattr(target, overload).tags)


def external_state_reason(gm: torch.fx.GraphModule, device_type: str) -> str | None:
    """Ops that read per-step state from outside the graph's inputs cannot be replayed.

    Two kinds are recognised: ops their library tags ``torch.Tag.cudagraph_unsafe`` (torch's
    mechanism, which Inductor's graph partition and CUDA Graph Trees read too), and vLLM's
    attention ops, which vLLM leaves untagged.

    vLLM's attention ops take their metadata (sequence lengths, block tables, their sizes as
    Python ints) from vLLM's forward context, not from graph inputs: a captured graph would replay
    the metadata of the step it was captured on. vLLM itself leaves attention out of its graphs
    (PIECEWISE) or captures it with metadata buffers it manages (FULL). On CPU the emulated graph
    runs every op again, so nothing is stale there.
    """
    if device_type == "cpu":
        return None
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        op = called_op(node)
        name = op_name(op)
        if _UNSAFE_TAG is not None and _UNSAFE_TAG in op_tags(op):
            return (
                f"node {node.name} ({name}) is declared cudagraph_unsafe by its library (torch's "
                "tag for ops a device graph cannot replay); run it outside the compiled region"
            )
        if name.startswith("vllm::") and "attention" in name:
            # vLLM registers its attention ops untagged and splits its own graphs by name.
            return (
                f"node {node.name} ({name}) reads vLLM's per-step attention metadata from outside "
                "the graph's inputs, so a replay would reuse the captured step's; let vLLM "
                "capture (NPU_COMPILE_VLLM_PLATFORM=1, see docs/serving-vllm.md)"
            )
    return None


def unsafe_tag() -> object | None:
    """The tag ``torch.Tag.cudagraph_unsafe`` (``None`` on a torch without it)."""
    return _UNSAFE_TAG


# torch's own declaration that an op must not be captured (Inductor partitions around it); absent
# from older torch.
_UNSAFE_TAG = getattr(torch.Tag, "cudagraph_unsafe", None)
