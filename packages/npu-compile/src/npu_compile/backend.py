"""The ``torch.compile`` backend: reduce-overhead capture and replay of FX graphs.

``torch.compile(model, backend=get_npu_backend(compiler_config=config))``, or, with no import,
``torch.compile(model, backend="npu_compile")`` (a ``torch_dynamo_backends`` entry point).

The backend lowers its config once (``_lowering``, into ``_settings.Settings``; once more per
``torch.compile(options=...)`` call); what it does per FX graph is in ``_pipeline`` (transform,
plan in ``_planner``, build in ``_build``); this module holds the backend object, the only one
below the package's surface that holds a :class:`CompilerConfig`.

Steps. Each top-level call of a compiled function begins a new step for its thread (unless a
backward is pending, see ``_training``): runners may then overwrite what they handed out in
earlier steps (npu-mempool's ``keep_held_outputs=False``, lowered from
``debug.aclgraph.keep_held_outputs``). Dynamo enters a backend's ``backend_ctx_ctor`` around every
top-level call in the calling thread, which tells each thread's calls apart exactly; both the
backend object and the registered ``"npu_compile"`` function carry npu-mempool's
``top_level_call`` there (Dynamo's ``WrapBackendDebug`` copies the instance ``__dict__``).
``torch.compile`` wraps every backend but Inductor in ``torch._TorchCompileWrapper``, which does not
forward it: for those calls npu-mempool falls back to torch's process-wide generation counter, as
CUDA Graph Trees do (see ``npu_mempool.CaptureOptions.keep_held_outputs``).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import npu_mempool
import torch

from npu_compile import _logs, _passes
from npu_compile._lowering import lower
from npu_compile._pipeline import compile_graph
from npu_compile._settings import Settings
from npu_compile._stats import BackendStats, loaded_stats
from npu_compile._training import release_holds
from npu_compile.configs import _config_checks
from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.errors import BackendError

__all__ = [
    "NpuBackend",
    "get_npu_backend",
    "npu_compile_backend",
    "BackendStats",
    "process_stats",
    "loaded_stats",
]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]


class NpuBackend:
    """A Dynamo backend bound to one :class:`CompilerConfig` (snapshotted at creation).

    Use :func:`get_npu_backend` to make one. Calling it is Dynamo's job.

    Args:
        config: The options; ``None`` means the defaults.
        custom_decompositions: ``{ATen op overload: function}`` applied while AOT autograd
            traces the graph.
        capture: ``False`` runs every graph through the pipeline without capturing it, for an
            engine that captures the compiled function itself (vLLM's static-graph wrapper).
        static_kernel_build_dir: Where static kernels are built when the config names no
            directory (``experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir``
            is None): an engine's cache directory. The config is left as it is.

    Attributes:
        config: The configuration (a private copy; later edits to the caller's object have no
            effect).
        capture: Whether graphs are captured (see ``capture`` above).
        stats: :class:`BackendStats` of the FX graphs this backend compiled.
    """

    compiler_name = "npu_compile"

    def __init__(
        self,
        config: CompilerConfig | None = None,
        custom_decompositions: Mapping[Any, Callable[..., Any]] | None = None,
        *,
        capture: bool = True,
        static_kernel_build_dir: str | None = None,
    ) -> None:
        if config is not None and not isinstance(config, CompilerConfig):
            raise BackendError(
                f"compiler_config must be an npu_compile.CompilerConfig, got "
                f"{type(config).__name__}: build one with npu_compile.CompilerConfig()"
            )
        self.config = (config or CompilerConfig()).copy()
        self.capture = capture
        self.stats = BackendStats()
        self.decompositions = _passes.check_decompositions(custom_decompositions)
        _config_checks.check_mode(self.config)
        # Lowered once: every graph of this backend reads the same frozen settings.
        self._build_dir = static_kernel_build_dir
        self._settings = lower(self.config, capture=capture, build_dir=static_kernel_build_dir)
        self._warned: set[str] = set()
        # torch.compile(options=...): the dict, a copy of its contents, its lowered settings.
        self._options: tuple[dict[str, object], dict[str, object], Settings] | None = None
        _config_checks.warn_no_effect(self.config, self._warned)
        _logs.register()
        _live_backends[id(self)] = self
        # Entered by Dynamo around every top-level call of a function compiled with this
        # backend, in the calling thread: it begins that thread's new step. An instance attribute,
        # since Dynamo's wrapper copies the instance __dict__ (see the module docstring).
        self.backend_ctx_ctor = npu_mempool.top_level_call

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, NpuBackend)
            and other.config == self.config
            and other.capture == self.capture
            and other.decompositions == self.decompositions
            and other._build_dir == self._build_dir
        )

    def __hash__(self) -> int:
        return hash(("NpuBackend", self.config, self.capture))

    def __repr__(self) -> str:
        return f"NpuBackend({self.config!r})"

    def __copy__(self) -> NpuBackend:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> NpuBackend:
        # Frameworks copy the backend they are handed (Hugging Face's CompileConfig deep-copies
        # it); a copy would collect the statistics where the user cannot see them. The config
        # is a private snapshot already, so sharing the object is safe.
        return self

    def reset(self) -> None:
        """Forget the statistics (called by ``torch._dynamo.reset()``).

        Steps that training forwards hold open for their backward are released too: their graphs
        are gone.
        """
        self.stats = BackendStats()
        release_holds()

    def __call__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[object],
        *,
        mode: str | None = None,
        options: dict[str, object] | None = None,
    ) -> CompiledFn:
        """Compile one Dynamo FX graph.

        Args:
            gm: The Dynamo graph.
            example_inputs: Its example inputs (fake or real tensors, SymInts).
            mode: ``torch.compile(mode=...)``; only ``"reduce-overhead"`` (or none) is accepted.
            options: ``torch.compile(options=...)`` with TorchAir npugraph_ex option names.

        Returns:
            The callable Dynamo runs in place of the graph.
        """
        settings = self._settings
        if mode not in (None, "default", "reduce-overhead"):
            raise BackendError(
                f"torch.compile(mode={mode!r}) is not supported by the npu_compile backend; "
                "use mode='reduce-overhead' or leave mode out"
            )
        if options is not None:
            settings = self._lowered_options(options)
        self.stats.fx_graphs += 1
        return compile_graph(gm, list(example_inputs), settings, self.stats, self.decompositions)

    def _lowered_options(self, options: dict[str, object]) -> Settings:
        """The settings for ``torch.compile(options=...)``: lowered once per call of it.

        ``torch.compile`` hands the backend the same dict for every FX graph of one compiled
        function; it is lowered the first time and its settings kept while that dict is the
        one passed, with the same contents.
        """
        cached = self._options
        if cached is not None and cached[0] is options and cached[1] == options:
            return cached[2]
        config = self.config.with_options(options)
        _config_checks.warn_no_effect(config, self._warned)
        settings = lower(config, capture=self.capture, build_dir=self._build_dir)
        self._options = (options, dict(options), settings)
        return settings


def get_npu_backend(
    *,
    compiler_config: CompilerConfig | None = None,
    custom_decompositions: Mapping[Any, Callable[..., Any]] | None = None,
) -> NpuBackend:
    """Return a ``torch.compile`` backend configured by ``compiler_config``.

    Args:
        compiler_config: Options; ``None`` means the defaults (reduce-overhead). The config is
            copied: edit it before this call.
        custom_decompositions: ``{ATen op overload: function}`` applied while AOT autograd
            traces the graph (the function replaces the op in the captured graph).

    Returns:
        The backend, for ``torch.compile(model, backend=...)``.

    Raises:
        BackendError: ``compiler_config.mode`` is ``"max-autotune"`` (GE), or the
            decompositions are not ``{op: function}``.

    Example:
        >>> import torch
        >>> from npu_compile import CompilerConfig, get_npu_backend
        >>> config = CompilerConfig()
        >>> config.mode = "reduce-overhead"
        >>> backend = get_npu_backend(compiler_config=config)
        >>> model = torch.nn.Linear(4, 4)
        >>> compiled = torch.compile(model, backend=backend)
        >>> x = torch.ones(2, 4)
        >>> with torch.no_grad():
        ...     torch.allclose(compiled(x), model(x))
        True
    """
    return NpuBackend(compiler_config, custom_decompositions)


_default_backend: NpuBackend | None = None

# Every backend object alive in this process, for process-wide reports (a serving engine's worker
# reports what its compiled model did without knowing which backend object compiled it). Touched
# when a backend is made, never on the per-call path. Keyed by identity: backends with equal
# configs compare equal, and each must count.
_live_backends: weakref.WeakValueDictionary[int, NpuBackend] = weakref.WeakValueDictionary()


def process_stats() -> dict[str, int]:
    """The counts of every backend in this process, and of graphs loaded from compile caches.

    Returns:
        ``fx_graphs`` (compiled here), ``captured``, ``eager`` and ``fallbacks`` summed over
        the live backend objects and the loaded graphs, and ``loaded``: FX graphs rebuilt from
        a saved artifact (torch's AOT compile, vLLM's compile cache) instead of compiled here.
    """
    totals = {name: 0 for name in BackendStats().snapshot()}
    for backend in list(_live_backends.values()):
        for name, value in backend.stats.snapshot().items():
            totals[name] += value
    loaded = loaded_stats.snapshot()
    for name in ("captured", "eager", "fallbacks"):
        totals[name] += loaded[name]
    totals["loaded"] = loaded["fx_graphs"]
    return totals


def npu_compile_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object], **kwargs: Any
) -> CompiledFn:
    """The backend behind ``torch.compile(model, backend="npu_compile")`` (default options).

    Args:
        gm: The Dynamo graph.
        example_inputs: Its example inputs.
        **kwargs: ``mode`` and ``options`` from ``torch.compile``.

    Returns:
        The callable Dynamo runs in place of the graph.
    """
    global _default_backend
    if _default_backend is None:
        _default_backend = NpuBackend()
    return _default_backend(gm, example_inputs, **kwargs)


# Dynamo enters it around every top-level call of a function compiled with the registered name.
npu_compile_backend.backend_ctx_ctor = npu_mempool.top_level_call  # type: ignore[attr-defined]
