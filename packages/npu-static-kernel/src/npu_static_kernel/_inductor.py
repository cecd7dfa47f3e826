"""Inductor builder: the graph compiled by TorchInductor for exactly the recorded static shapes."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch

from npu_static_kernel._interface import BuildRequest, StaticKernelBuilder
from npu_static_kernel.errors import BuildError, CacheError

__all__ = ["InductorBuilder"]

_ARTIFACT = "inductor_artifact.bin"


class InductorBuilder(StaticKernelBuilder):
    """Compile the FX graph with ``torch._inductor.standalone_compile`` for static shapes.

    The compiled graph is saved as one portable file with ``CompiledArtifact.save(format=
    "binary")`` and loaded back with ``CompiledArtifact.load``, so a second process (or a later
    run) skips compilation. Works on CUDA (Triton kernels) and CPU (C++ kernels, needs a C++
    compiler); graph inputs mutated by ``aten.copy_`` are still written by the compiled code.

    Args:
        options: Inductor options passed to ``standalone_compile`` (for example
            ``{"max_autotune": True}``); they are part of the cache key.
    """

    name: ClassVar[str] = "inductor"

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = dict(options or {})

    def compute_hash(self) -> str:
        """Return the Inductor options (sorted JSON) so other options never share an artifact."""
        return json.dumps(self.options, sort_keys=True, default=str)

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        """Compile ``request.gm`` for the shapes of ``request.args`` and save it in ``out_dir``."""
        from torch._inductor import standalone_compile

        try:
            portable, constants = _portable_copy(request.gm)
            artifact = standalone_compile(
                portable,
                [*request.args, *(_constant_values(request.gm, constants))],
                dynamic_shapes="from_example_inputs",
                options=dict(self.options),
                donate_graph_module=True,
            )
            artifact.save(path=str(out_dir / _ARTIFACT), format="binary")
        except Exception as exc:
            raise BuildError(
                f"Inductor could not compile the graph for static shapes ({type(exc).__name__}: "
                f"{exc}); run the graph without static kernels, or report the graph "
                "(gm.print_readable()) with the error"
            ) from exc

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        """Load the saved artifact and adapt its outputs to ``gm.forward``'s output structure."""
        from torch._inductor.standalone_compile import CompiledArtifact

        path = artifact_dir / _ARTIFACT
        try:
            artifact = CompiledArtifact.load(path=str(path), format="binary")
        except Exception as exc:
            raise CacheError(
                f"cannot load the Inductor artifact {path} ({type(exc).__name__}: {exc}); "
                f"remove it with `npu-static-kernel clean --key {request.key}` and run again"
            ) from exc
        constants = _constant_values(request.gm, _tensor_constants(request.gm))
        return _OutputAdapter(artifact, _output_kind(request.gm), constants)


def _portable_copy(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[str]]:
    """Copy ``gm`` for ``standalone_compile``: tensor constants lifted to inputs, no type notes.

    Tensor attributes (``get_attr``: the ``_tensor_constant0`` of a literal, buffers) become
    trailing placeholders. Left as attributes, Inductor lifts them into inputs of the compiled
    code too, but a saved and loaded ``CompiledArtifact`` no longer knows their values and fails
    with too few arguments; passed explicitly, the loaded artifact gets them on every call.
    Graphs from ``make_fx`` annotate the return type with generated names that Inductor cannot
    serialise into an artifact; the annotations carry no information the compiler needs.

    Returns:
        The copy, and the attribute names of the lifted constants, in placeholder order.
    """
    graph = torch.fx.Graph()
    remap: dict[torch.fx.Node, torch.fx.Node] = {}
    nodes = list(gm.graph.nodes)
    for node in nodes:
        if node.op == "placeholder":
            remap[node] = graph.node_copy(node, lambda n: remap[n])
    constants = _tensor_constants(gm)
    lifted = {
        target: graph.placeholder(f"_static_kernel_constant_{i}")
        for i, target in enumerate(constants)
    }
    for node in nodes:
        if node.op == "get_attr" and str(node.target) in lifted:
            remap[node] = lifted[str(node.target)]
    for node in nodes:
        if node not in remap:
            remap[node] = graph.node_copy(node, lambda n: remap[n])
    for node in graph.nodes:
        node.type = None
    return torch.fx.GraphModule(gm, graph), constants


def _tensor_constants(gm: torch.fx.GraphModule) -> list[str]:
    """Attribute names of the tensors ``gm`` reads with ``get_attr``, in first-use order."""
    found: dict[str, None] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr" and isinstance(_attribute(gm, str(node.target)), torch.Tensor):
            found[str(node.target)] = None
    return list(found)


def _attribute(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


def _constant_values(gm: torch.fx.GraphModule, targets: list[str]) -> tuple[torch.Tensor, ...]:
    return tuple(_attribute(gm, target) for target in targets)


def _output_kind(gm: torch.fx.GraphModule) -> str:
    """How ``gm.forward`` packs its outputs: ``"tuple"``, ``"list"`` or ``"single"``."""
    for node in gm.graph.nodes:
        if node.op == "output":
            result = node.args[0]
            if isinstance(result, tuple):
                return "tuple"
            if isinstance(result, list):
                return "list"
            return "single"
    return "tuple"


class _OutputAdapter:
    """Call a compiled artifact and return outputs packed exactly like ``gm.forward``'s."""

    def __init__(
        self, compiled: Callable[..., Any], kind: str, constants: tuple[torch.Tensor, ...] = ()
    ) -> None:
        self._compiled = compiled
        self._kind = kind
        self._constants = constants

    def __call__(self, *args: Any) -> Any:
        out = self._compiled(*args, *self._constants)
        if self._kind == "single":
            return out[0] if isinstance(out, (list, tuple)) and len(out) == 1 else out
        if self._kind == "tuple" and not isinstance(out, tuple):
            return tuple(out)
        if self._kind == "list" and not isinstance(out, list):
            return list(out)
        return out
