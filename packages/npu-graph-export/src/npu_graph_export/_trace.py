"""Capture a model as one ATen graph with Dynamo (``torch.export``, strict), on fake tensors."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.export import Dim, ExportedProgram
from torch.fx.experimental.symbolic_shapes import is_concrete_int

from npu_graph_export._locations import torch_cause
from npu_graph_export._shared_inputs import shared_inputs
from npu_graph_export.errors import (
    DataDependentControlFlowError,
    ExportError,
    GraphBreakError,
)

aten = torch.ops.aten

# High-level ops GE has fused kernels for (or that read better in the graph) stay whole instead
# of being decomposed to core ATen; everything else takes torch's default decompositions.
_PRESERVED = (
    aten.linear.default,
    aten.matmul.default,
    aten.scaled_dot_product_attention.default,
    aten.silu.default,
    aten.gelu.default,
    aten.layer_norm.default,
    aten.rms_norm.default,
    aten.softmax.int,
    aten.log_softmax.int,
    aten.masked_fill.Scalar,
    aten.masked_fill.Tensor,
    aten.tril.default,
    aten.triu.default,
)

_DATA_DEPENDENT_MARKERS = (
    "data-dependent",
    "data dependent",
    "GuardOnDataDependentSymNode",
    "control flow",
    "Dynamic control flow",
)


# Interpolation stays whole in core ATen, but GE's resize operators index the input the way
# TensorFlow does, which differs from PyTorch for scales that are not whole numbers: torch's own
# decompositions (index arithmetic, gathers, lerps) keep PyTorch's numbers exactly.
_DECOMPOSED = (
    aten.upsample_nearest1d.vec,
    aten.upsample_nearest1d.default,
    aten.upsample_nearest2d.vec,
    aten.upsample_nearest2d.default,
    aten.upsample_nearest3d.vec,
    aten.upsample_nearest3d.default,
    aten._upsample_nearest_exact1d.vec,
    aten._upsample_nearest_exact2d.vec,
    aten._upsample_nearest_exact3d.vec,
    aten.upsample_linear1d.vec,
    aten.upsample_linear1d.default,
    aten.upsample_bilinear2d.vec,
    aten.upsample_bilinear2d.default,
    aten.upsample_trilinear3d.vec,
    aten.upsample_trilinear3d.default,
)


def _decompositions() -> Any:
    from torch._decomp import decomposition_table

    table = torch.export.default_decompositions()
    for op in _PRESERVED:
        if op in table:
            del table[op]
    for op in _DECOMPOSED:
        if op in decomposition_table:
            table[op] = decomposition_table[op]
    return table


def _dynamic_shapes(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    dynamic: bool,
    dynamic_dims: Mapping[str, Sequence[int]] | None,
) -> Any:
    """torch.export's ``dynamic_shapes`` for the example inputs, or None for a static export.

    ``dynamic=True`` lets every dimension of every tensor input vary (``Dim.AUTO``: torch keeps
    a dimension static only where the model requires it) and every Python ``int`` input too.
    Dimensions named in ``dynamic_dims`` (by forward() argument name) or marked with
    ``torch._dynamo.mark_dynamic`` are dynamic even with ``dynamic=False``, and even when the
    example size is 1 (``Dim.DYNAMIC``, which torch refuses to specialise silently).

    Raises:
        ExportError: ``dynamic_dims`` names an argument forward() does not take, or a dim
            its example tensor does not have.
    """
    wanted = {name: {int(d) for d in dims} for name, dims in (dynamic_dims or {}).items()}

    def spec(value: Any, name: str) -> Any:
        if isinstance(value, torch.Tensor):
            marked = set(getattr(value, "_dynamo_dynamic_indices", ()))
            chosen = {d % max(value.dim(), 1) for d in wanted.get(name, ())} | marked
            if any(d >= value.dim() for d in wanted.get(name, ())):
                raise ExportError(
                    f"dynamic_dims[{name!r}] names dimension(s) {sorted(wanted[name])} but the "
                    f"example tensor has {value.dim()}; give dims of that tensor"
                )
            shape: dict[int, Any] = {}
            for i in range(value.dim()):
                if i in chosen:
                    shape[i] = Dim.DYNAMIC
                elif dynamic:
                    shape[i] = Dim.AUTO
            return shape or None
        if isinstance(value, int) and not isinstance(value, bool):
            return Dim.DYNAMIC if (dynamic or name in wanted) else None
        if isinstance(value, list | tuple):
            return type(value)(spec(v, f"{name}[{i}]") for i, v in enumerate(value))
        if isinstance(value, dict):
            return {k: spec(v, str(k)) for k, v in value.items()}
        return None

    try:
        signature = inspect.signature(model.forward)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        bound = None
    if bound is None:  # no usable signature: positional inputs only
        return tuple(spec(a, str(i)) for i, a in enumerate(args)) if not kwargs else None
    names: set[str] = set()
    shapes: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            shapes[name] = tuple(spec(v, f"{name}[{i}]") for i, v in enumerate(value))
        elif kind == inspect.Parameter.VAR_KEYWORD:
            # Inputs that land in forward(**kwargs) are given by name (see _named_inputs).
            shapes.update({k: spec(v, k) for k, v in value.items()})
            names |= set(value)
        else:
            shapes[name] = spec(value, name)
            names.add(name)
    unknown = set(wanted) - names
    if unknown:
        raise ExportError(
            f"dynamic_dims names {sorted(unknown)}, which are not inputs of "
            f"{type(model).__name__}.forward in this call; use the argument names of the "
            f"example inputs ({sorted(names)})"
        )
    if not any(_has_dim(s) for s in shapes.values()):
        return None
    return shapes


@contextmanager
def _named_inputs(model: torch.nn.Module, kwargs: dict[str, Any]) -> Iterator[None]:
    """Let torch.export see the keyword inputs that fill ``forward(**kwargs)`` as named ones.

    torch.export (2.11-2.13) cannot apply ``dynamic_shapes`` to tensors inside ``**kwargs``
    (it fails, or without dynamic shapes silently exports them static). While tracing,
    forward() advertises a signature with one keyword parameter per such input; the call
    itself is unchanged.
    """
    forward = getattr(model.forward, "__func__", None)
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        signature = None
    var_keyword = [
        p for p in (signature.parameters.values() if signature else []) if p.kind == p.VAR_KEYWORD
    ]
    extra = [k for k in kwargs if signature is not None and k not in signature.parameters]
    if forward is None or signature is None or not var_keyword or not extra:
        yield
        return
    params = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in extra]
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    had = "__signature__" in vars(forward)
    old = vars(forward).get("__signature__")
    forward.__signature__ = signature.replace(parameters=[self_param, *params])
    try:
        yield
    finally:
        if had:
            forward.__signature__ = old
        else:
            del forward.__signature__


def _refuse_aliased_inputs(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], error: Exception
) -> None:
    """Raise a clear ExportError for ``error`` if two example inputs share memory.

    torch.export fails on such inputs when the model writes one of them (a cache passed twice,
    or a view of another input) with an internal assertion.
    """
    aliased = _aliased_inputs(model, args, kwargs)
    if aliased:
        raise ExportError(
            f"inputs {aliased[0]!r} and {aliased[1]!r} are different views of one tensor "
            "(another offset, shape or strides) and the model writes to one of them; an offline "
            "graph's inputs cannot overlap in part, so pass a .clone() of one of them (the same "
            "tensor passed twice is fine: it becomes one graph input)"
        ) from error


def _aliased_inputs(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, str] | None:
    """Names of two example tensors that share storage, or None."""
    try:
        names = list(inspect.signature(model.forward).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        names = []
    leaves = [*args, *kwargs.values()]
    labels = [*(names[: len(args)] or [f"args[{i}]" for i in range(len(args))]), *kwargs]
    seen: dict[int, str] = {}
    for label, value in zip(labels, leaves, strict=False):
        if not isinstance(value, torch.Tensor) or value.device.type == "meta":
            continue
        try:
            key = value.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            continue
        if key and key in seen:
            return seen[key], label
        seen.setdefault(key, label)
    return None


def _has_dim(spec: Any) -> bool:
    """True when a dynamic_shapes tree holds at least one Dim (not all None)."""
    if spec is None:
        return False
    if isinstance(spec, dict):
        return any(_has_dim(v) for v in spec.values())
    if isinstance(spec, list | tuple):
        return any(_has_dim(v) for v in spec)
    return True


def trace(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    dynamic: bool,
    dynamic_dims: Mapping[str, Sequence[int]] | None = None,
) -> ExportedProgram:
    """Return the model's inference graph in ATen ops, traced on fake tensors (nothing runs).

    Raises:
        DataDependentControlFlowError: the model branches on tensor values.
        GraphBreakError: Dynamo cannot capture the model as a single graph.
    """
    try:
        inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError as error:
        raise ExportError(
            f"the example inputs do not match {type(model).__name__}.forward: {error}; pass one "
            "example value per forward() argument (positional *args, keyword **kwargs)"
        ) from error
    except ValueError:  # no signature to check (a builtin); let Dynamo judge
        pass
    # The same tensor passed twice is one graph input (see _shared_inputs).
    with shared_inputs(model, args, kwargs) as shared:
        return _trace(
            model,
            shared.args,
            shared.kwargs,
            dynamic=dynamic,
            dynamic_dims=shared.rename(dynamic_dims),
        )


def _trace(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    dynamic: bool,
    dynamic_dims: Mapping[str, Sequence[int]] | None,
) -> ExportedProgram:
    dynamic_shapes = _dynamic_shapes(
        model, args, kwargs, dynamic=dynamic, dynamic_dims=dynamic_dims
    )
    with warnings.catch_warnings():
        # torch 2.13's export pickles pytree specs through a deprecated isinstance check; the
        # warning is about torch internals, not the user's model.
        warnings.filterwarnings("ignore", message=_TORCH_NOISE, category=FutureWarning)
        # A dynamic dimension whose example size is 1 (a batch-1 example) would be specialised
        # to 1 by torch's 0/1 rule; size-oblivious reasoning keeps it symbolic.
        oblivious = torch.fx.experimental._config.patch(  # type: ignore[attr-defined]
            backed_size_oblivious=dynamic_shapes is not None
        )
        try:
            with _named_inputs(model, kwargs), oblivious:
                program = _export(model, args, kwargs, dynamic_shapes)
        except DataDependentControlFlowError:
            if dynamic_shapes is None:
                raise
            # Size-oblivious reasoning can make a size unbacked that ordinary reasoning keeps
            # (torch 2.11: a slice write at a dynamic int position); without it a size-1
            # dimension marked Dim.DYNAMIC fails loudly rather than being specialised.
            with _named_inputs(model, kwargs):
                program = _export(model, args, kwargs, dynamic_shapes)
        try:
            decomposed: ExportedProgram = program.run_decompositions(_decompositions())
        except Exception as error:
            _refuse_aliased_inputs(model, args, kwargs, error)
            raise
    if dynamic and not _any_dynamic_input(decomposed):
        warnings.warn(
            "dynamic=True, but the model fixes every input dimension (each one is used where "
            "only its example size works), so the graph is static; check the example shapes",
            UserWarning,
            stacklevel=4,
        )
    return decomposed


def _any_dynamic_input(program: ExportedProgram) -> bool:
    """True when some user input has a dimension (or is an int) known only at run time."""
    users = set(program.graph_signature.user_inputs)
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in users:
            continue
        value = node.meta.get("val")
        if isinstance(value, torch.SymInt) and not is_concrete_int(value):
            return True
        if isinstance(value, torch.Tensor) and not all(is_concrete_int(d) for d in value.shape):
            return True
    # No tensor or int inputs at all: nothing could have been dynamic.
    return not any(node.op == "placeholder" and node.name in users for node in program.graph.nodes)


_TORCH_NOISE = r".*isinstance\(treespec, LeafSpec\)"


def _export(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], dynamic_shapes: Any
) -> ExportedProgram:
    try:
        with torch.no_grad():
            exported: ExportedProgram = torch.export.export(
                model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=True
            )
            return exported
    except Exception as error:  # torch raises many unrelated types for one cause
        _refuse_aliased_inputs(model, args, kwargs, error)
        text = f"{type(error).__name__}: {error}"
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else text
        # Torch's first line names the guard (Eq(u0, 1)); the user's line that took it is
        # further down its text, and it is what the user can change.
        cause = torch_cause(str(error))
        said = first_line.rstrip()
        caused_by = ""
        if cause:
            said += "" if said.endswith((".", "?", "!")) else "."
            caused_by = f" Caused by: {cause}"
        if any(marker in text for marker in _DATA_DEPENDENT_MARKERS):
            raise DataDependentControlFlowError(
                "the model branches on tensor values (data-dependent control flow), which an "
                "offline graph cannot express; compute both branches and select with "
                f"torch.where, or move the decision out of forward(). Dynamo said: {said}"
                f"{caused_by}"
            ) from error
        if first_line.endswith("when making fake tensor call"):
            # An op failed on the fake example inputs: the model would fail in eager too.
            details = [
                line.strip().split(":", 1)[1].strip()
                for line in str(error).splitlines()
                if line.strip().startswith(("Explanation:", "Developer debug context:"))
            ]
            detail = next((d for d in details if d), first_line)
            raise ExportError(
                "the model fails on the example inputs (it would fail in eager too): check "
                f"their shapes and dtypes against what forward() expects. Torch said: {detail}"
            ) from error
        if "unrecognized type" in first_line and "Cache" in first_line:
            # transformers models return their KV cache object unless told not to.
            raise ExportError(
                "the model returns a KV-cache object (not a tensor) among its outputs; pass "
                f"use_cache=False to export it (as a keyword input). Dynamo said: {first_line}"
            ) from error
        raise GraphBreakError(
            "Dynamo could not capture the model as one graph (fullgraph); remove the unsupported "
            f"Python construct it names, or export a smaller module. Dynamo said: {said}"
            f"{caused_by}"
        ) from error
