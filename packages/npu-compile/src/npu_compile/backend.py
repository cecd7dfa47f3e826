"""The ``torch.compile`` backend: reduce-overhead capture and replay of FX graphs.

``torch.compile(model, backend=get_npu_backend(compiler_config=config))``, or, with no import,
``torch.compile(model, backend="npu_compile")`` (a ``torch_dynamo_backends`` entry point).

What the backend does per FX graph is in ``_pipeline`` (checks in ``_capturable``, input classes
in ``_inputs``, config lowering in ``_lowering``); this module holds the backend object.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from npu_compile import _compat, _logs, _passes
from npu_compile._fallback import Fallback, FallbackReason
from npu_compile._pipeline import compile_graph
from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.errors import BackendError

if TYPE_CHECKING:
    from npu_mempool import GraphRunner

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


@dataclass
class BackendStats:
    """What one backend object did, for users and tests.

    Attributes:
        fx_graphs: FX graphs handed to the backend by Dynamo.
        captured: FX graphs given to a graph runner (capture and replay).
        eager: FX graphs run without capture because ``debug.run_eagerly`` is set.
        fallbacks: A :class:`Fallback` ``(graph, message)`` for each FX graph that fell back to
            eager, in order; it unpacks as a pair (``for graph, message in stats.fallbacks``).
            A captured graph that runs without its static kernels (reason
            ``static_kernel_failed``) is listed too, once.
        fallback_reasons: The :class:`FallbackReason` of each graph in ``fallbacks``, by graph
            name (``collections.Counter(stats.fallback_reasons.values())`` counts them per
            reason).
        piecewise: FX graphs captured in pieces, split around operators that run eagerly
            (counted in ``captured`` too).
        pieces: Pieces captured, summed over those graphs; each has a runner in ``runners``,
            named ``<graph>.piece<i>``.
        splits: For each graph captured in pieces, the nodes run eagerly between them and why.
    """

    fx_graphs: int = 0
    captured: int = 0
    eager: int = 0
    fallbacks: list[Fallback] = field(default_factory=list)
    fallback_reasons: dict[str, FallbackReason] = field(default_factory=dict)
    piecewise: int = 0
    pieces: int = 0
    splits: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Weak: a runner (and its graph pool) must die with the compiled code that uses it, not live
    # on in the statistics of a long-lived backend such as the one behind backend="npu_compile".
    _runner_refs: list[weakref.ref[GraphRunner]] = field(default_factory=list, repr=False)

    @property
    def runners(self) -> list[GraphRunner]:
        """The graph runners created and still alive, in creation order.

        Their ``counters`` hold captures, replays and pool bytes.
        """
        alive = (ref() for ref in self._runner_refs)
        return [runner for runner in alive if runner is not None]

    def _add_runner(self, runner: GraphRunner) -> None:
        self._runner_refs.append(weakref.ref(runner))

    def _add_fallback(self, graph: str, reason: FallbackReason, message: str) -> None:
        self.fallbacks.append(Fallback(graph, message))
        self.fallback_reasons[graph] = reason

    def _add_split(self, graph: str, pieces: int, splits: tuple[str, ...]) -> None:
        self.piecewise += 1
        self.pieces += pieces
        self.splits[graph] = splits

    def snapshot(self) -> dict[str, Any]:
        """The counts as a plain dict (``fallbacks`` as a count; the reasons stay on the object)."""
        return {
            "fx_graphs": self.fx_graphs,
            "captured": self.captured,
            "eager": self.eager,
            "fallbacks": len(self.fallbacks),
            "piecewise": self.piecewise,
            "pieces": self.pieces,
        }

    @contextlib.contextmanager
    def expect(self, **deltas: int) -> Iterator[None]:
        """Assert how much each named count moves inside the ``with`` block.

        Raises:
            AssertionError: A count moved by another amount (all mismatches are listed).
            TypeError: A name that is not a count.
        """
        unknown = sorted(set(deltas) - set(self.snapshot()))
        if unknown:
            raise TypeError(f"unknown count(s) {unknown}; expected some of {list(self.snapshot())}")
        before = self.snapshot()
        yield
        after = self.snapshot()
        wrong = [
            f"{name} moved by {after[name] - before[name]}, expected {expected}"
            for name, expected in deltas.items()
            if after[name] - before[name] != expected
        ]
        if wrong:
            raise AssertionError("backend stats: " + "; ".join(wrong))


class NpuBackend:
    """A Dynamo backend bound to one :class:`CompilerConfig` (snapshotted at creation).

    Use :func:`get_npu_backend` to make one. Calling it is Dynamo's job.

    Attributes:
        config: The configuration (a private copy; later edits to the caller's object have no
            effect).
        stats: :class:`BackendStats` of the FX graphs this backend compiled.
    """

    compiler_name = "npu_compile"

    def __init__(
        self,
        config: CompilerConfig | None = None,
        custom_decompositions: Mapping[Any, Callable[..., Any]] | None = None,
    ) -> None:
        if config is not None and not isinstance(config, CompilerConfig):
            raise BackendError(
                f"compiler_config must be an npu_compile.CompilerConfig, got "
                f"{type(config).__name__}: build one with npu_compile.CompilerConfig()"
            )
        self.config = (config or CompilerConfig()).copy()
        self.stats = BackendStats()
        self.decompositions = _passes.check_decompositions(custom_decompositions)
        _compat.check_mode(self.config)
        self._warned: set[str] = set()
        _compat.warn_no_effect(self.config, self._warned)
        _logs.register()
        _live_backends[id(self)] = self

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, NpuBackend)
            and other.config == self.config
            and other.decompositions == self.decompositions
        )

    def __hash__(self) -> int:
        return hash(("NpuBackend", self.config))

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
        """Forget the statistics (called by ``torch._dynamo.reset()``)."""
        self.stats = BackendStats()

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
        config = self.config
        if mode not in (None, "default", "reduce-overhead"):
            raise BackendError(
                f"torch.compile(mode={mode!r}) is not supported by the npu_compile backend; "
                "use mode='reduce-overhead' or leave mode out"
            )
        if options is not None:
            config = config.with_options(options)
            _compat.warn_no_effect(config, self._warned)
        self.stats.fx_graphs += 1
        return compile_graph(gm, list(example_inputs), config, self.stats, self.decompositions)


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

#: What graphs loaded from a compile cache did: no backend object compiled them in this process.
loaded_stats = BackendStats()


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
