"""Capture a model as one ATen graph with Dynamo (``torch.export``, strict), on fake tensors."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import torch
from torch.export import Dim, ExportedProgram

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


def _decompositions() -> Any:
    table = torch.export.default_decompositions()
    for op in _PRESERVED:
        if op in table:
            del table[op]
    return table


def _dynamic_shapes(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Every dimension of every tensor input may vary (``Dim.AUTO``), as ``dynamic=True`` asks."""

    def spec(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return {i: Dim.AUTO for i in range(value.dim())}
        if isinstance(value, list | tuple):
            return type(value)(spec(v) for v in value)
        if isinstance(value, dict):
            return {k: spec(v) for k, v in value.items()}
        return None

    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError:
        return tuple(spec(a) for a in args) if not kwargs else None
    params = inspect.signature(model.forward).parameters
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params.values()):
        return tuple(spec(a) for a in args) if not kwargs else None
    return {name: spec(value) for name, value in bound.arguments.items()}


def trace(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], *, dynamic: bool
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
    dynamic_shapes = _dynamic_shapes(model, args, kwargs) if dynamic else None
    with warnings.catch_warnings():
        # torch 2.13's export pickles pytree specs through a deprecated isinstance check; the
        # warning is about torch internals, not the user's model.
        warnings.filterwarnings("ignore", message=_TORCH_NOISE, category=FutureWarning)
        program = _export(model, args, kwargs, dynamic_shapes)
        decomposed: ExportedProgram = program.run_decompositions(_decompositions())
        return decomposed


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
        text = f"{type(error).__name__}: {error}"
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else text
        if any(marker in text for marker in _DATA_DEPENDENT_MARKERS):
            raise DataDependentControlFlowError(
                "the model branches on tensor values (data-dependent control flow), which an "
                "offline graph cannot express; compute both branches and select with "
                f"torch.where, or move the decision out of forward(). Dynamo said: {first_line}"
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
        raise GraphBreakError(
            "Dynamo could not capture the model as one graph (fullgraph); remove the unsupported "
            f"Python construct it names, or export a smaller module. Dynamo said: {first_line}"
        ) from error
