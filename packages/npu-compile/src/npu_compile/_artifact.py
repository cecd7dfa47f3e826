"""Compiled graphs that torch's AOT compile can save and load without tracing again.

``torch.compile(...).aot_compile(...)``, ``torch.compiler.load_compiled_function`` and vLLM's
compile cache (``VLLM_USE_AOT_COMPILE``, on by default with torch >= 2.10) ask the backend for a
compiled function they can serialize. A later process loads it and skips Dynamo and AOT autograd
altogether, as TorchAir's ``cache_compile`` does.

Two layers, following torch's own non-Inductor backends (``aot_eager``):

* :class:`GraphArtifact`, an Inductor ``OutputCode`` the forward compiler returns while torch
  bundles AOT autograd's result. It keeps the graph that will run (after every pass), its plan
  (``_plan.GraphPlan``) and the lowered options. Serialized, it holds the graph
  (``GraphPickler``) and plain data; loaded, it is built from its plan (``_build``), never
  planned again. AOT autograd saves and restores its own runtime wrappers (input mutations,
  aliased outputs) around it.
* :class:`SerializedGraph`, the ``SerializableCallable`` handed back to Dynamo's AOT compile.
  It frames torch's bundle with a version and a SHA-256, so a truncated or foreign file is
  refused with a clear error rather than unpickled, and offers the ``finalize_loading`` hook vLLM
  calls after a load.

Everything here is reached only while torch bundles AOT results (``_pipeline.bundling``), so a plain
``torch.compile`` never imports Inductor through this module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch._dynamo.aot_compile_types import (
    BundledAOTAutogradSerializableCallable,
    SerializableCallable,
)
from torch._inductor.output_code import OutputCode

from npu_compile._build import build_loaded
from npu_compile.errors import BackendError

if TYPE_CHECKING:
    from npu_compile._plan import GraphPlan
    from npu_compile._settings import Settings

__all__ = ["GraphArtifact", "SerializedGraph", "ARTIFACT_FORMAT"]

logger = logging.getLogger("npu_compile")

#: Bumped whenever what :class:`GraphArtifact` pickles changes meaning; older files are refused.
ARTIFACT_FORMAT = 4
_MAGIC = b"npu-compile-aot\0"
# magic, format, SHA-256 of the bundle, length of the graph name (then the name, then the bundle).
_HEADER = struct.Struct("<16sH32sH")
_KEPT_META = ("val", "tensor_meta")


@dataclasses.dataclass
class GraphArtifact(OutputCode):
    """The forward graph of one FX graph as AOT autograd bundles it.

    Attributes:
        plan: What the graph becomes, as decided when it was compiled.
        settings: The lowered options it was compiled with (no graph pool: a pool belongs to
            a process).
        gm: The graph that runs; ``None`` while serialized.
    """

    plan: GraphPlan | None = None
    settings: Settings | None = None
    gm: torch.fx.GraphModule | None = None
    _serialized_gm: bytes | None = dataclasses.field(default=None, init=False)
    _function: Callable[..., Any] | None = dataclasses.field(default=None, init=False, repr=False)

    @property
    def name(self) -> str:
        """The FX graph's name (``npu_compile_<n>``), kept for logs after a load."""
        return self.plan.name if self.plan is not None else "?"

    def bind(self, function: Callable[..., Any]) -> GraphArtifact:
        """Set the callable that runs the graph in this process (unboxed arguments)."""
        self._function = function
        # AOT autograd calls an OutputCode with the list of inputs, as Inductor's graphs.
        self._boxed_call = True
        return self

    def __call__(self, inputs: Sequence[Any]) -> Any:
        function = self._function
        if function is None:
            raise BackendError(f"{self.name} was loaded but never rebuilt (post_compile not run)")
        return function(*inputs)

    def prepare_for_serialization(self) -> None:
        # Called on a shallow copy (AOT's pre_save): the live artifact keeps its function.
        from torch.fx._graph_pickler import GraphPickler, Options

        if self.gm is None:
            raise BackendError(f"{self.name}: nothing to serialize (the graph was dropped)")
        settings = self.settings
        if settings is not None and settings.shared_pool:
            raise BackendError(
                f"{self.name} uses aclgraph_config.use_custom_pool, a graph pool of this "
                "process: such a graph cannot be saved for another process; leave the option "
                "unset to use the compile cache"
            )
        for node in self.gm.graph.nodes:
            # Only the values and tensor metadata a loaded graph needs (static kernels read
            # them). The rest refers to objects of this process: module stacks, Dynamo's example
            # values, the reinplace pass's fake results of another fake mode, node links.
            node.meta = {key: node.meta[key] for key in _KEPT_META if key in node.meta}
        self._serialized_gm = GraphPickler.dumps(self.gm, Options(ops_filter=None))
        self.gm = None
        self._function = None

    def post_compile(self, *args: Any, **kwargs: Any) -> None:
        # AOT autograd calls this after a load (and, harmlessly, when nothing was serialized).
        if self.gm is not None or self._serialized_gm is None:
            return
        from torch._subclasses import FakeTensorMode
        from torch.fx._graph_pickler import GraphPickler
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        gm = GraphPickler.loads(self._serialized_gm, FakeTensorMode(shape_env=ShapeEnv()))
        if not isinstance(gm, torch.fx.GraphModule):
            raise BackendError(f"{self.name}: the saved graph is a {type(gm).__name__}")
        gm.recompile()
        self.gm = gm
        self._serialized_gm = None
        if self.plan is None or self.settings is None:
            raise BackendError(f"{self.name}: the artifact holds no plan (a foreign file)")
        self.bind(build_loaded(self.plan, gm, self.settings))

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        """No Triton kernels of ours to bundle."""


class SerializedGraph(SerializableCallable):
    """What the backend returns to Dynamo's AOT compile: AOT's bundled function, framed.

    Calling it runs the graph (captured and replayed as usual). ``serialize_compile_artifacts``
    and ``deserialize_compile_artifacts`` are Dynamo's protocol; ``finalize_loading`` is the
    hook vLLM calls after it loads a compiled model from its cache.
    """

    def __init__(self, compiled: Callable[..., Any], name: str) -> None:
        self.compiled = compiled
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled(*args, **kwargs)

    def finalize_loading(self, *args: Any, **kwargs: Any) -> None:
        """Nothing is left to do after a load: the runners were rebuilt while loading."""

    @classmethod
    def serialize_compile_artifacts(cls, fn: Any) -> bytes:
        """Frame torch's bundle of ``fn.compiled`` with a magic, a format number and a hash."""
        if not isinstance(fn, SerializedGraph):
            raise BackendError(f"expected a SerializedGraph, got {type(fn).__name__}")
        inner = BundledAOTAutogradSerializableCallable.serialize_compile_artifacts(
            BundledAOTAutogradSerializableCallable(fn.compiled)
        )
        name = fn.name.encode("utf-8")
        header = _HEADER.pack(_MAGIC, ARTIFACT_FORMAT, hashlib.sha256(inner).digest(), len(name))
        return header + name + inner

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> SerializedGraph:
        """Check the frame and rebuild the compiled function (no tracing).

        Raises:
            BackendError: The data is not an npu-compile artifact, has another format number, or
                does not match its hash (a truncated or edited file).
        """
        name, inner = _unframe(data)
        loaded = BundledAOTAutogradSerializableCallable.deserialize_compile_artifacts(inner)
        logger.info("FX graph %s loaded from a compiled artifact (no tracing)", name)
        return cls(loaded, name)


def _unframe(data: bytes) -> tuple[str, bytes]:
    # A fixed binary header, checked before torch's loader unpickles anything: a truncated,
    # foreign or damaged file is refused here.
    again = "; delete the compile cache entry to compile again"
    if len(data) < _HEADER.size:
        raise BackendError("not an npu-compile artifact (too short)" + again)
    magic, version, digest, name_length = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise BackendError("not an npu-compile artifact (no npu-compile header)" + again)
    if version != ARTIFACT_FORMAT:
        raise BackendError(
            f"the artifact has format {version}, this npu-compile reads {ARTIFACT_FORMAT}" + again
        )
    body = memoryview(data)[_HEADER.size :]
    name = bytes(body[:name_length]).decode("utf-8", errors="replace")
    inner = bytes(body[name_length:])
    if len(body) < name_length or hashlib.sha256(inner).digest() != digest:
        raise BackendError(
            f"artifact {name} does not match its SHA-256 (truncated or edited)" + again
        )
    return name, inner
