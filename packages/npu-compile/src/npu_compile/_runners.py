"""What a captured graph becomes: one graph runner, or captured pieces with eager nodes between.

Both record themselves in the backend's :class:`~npu_compile.backend.BackendStats` and log what
was captured; the forward compiler (``_forward``) and a graph rebuilt from a saved artifact
(``_rebuild``) build through here alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from npu_compile import _logs
from npu_compile._eager import forward_of
from npu_compile._fallback import FallbackReason
from npu_compile._lowering import capture_options
from npu_compile._piecewise import Split, piecewise
from npu_compile.configs.compiler_config import CompilerConfig

if TYPE_CHECKING:
    from npu_compile._stats import BackendStats
    from npu_compile._tensorify import Tensorified

__all__ = ["capture_pieces", "nothing_to_capture", "runner_function"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]


def runner_function(
    replayed: CompiledFn,
    prepared: torch.fx.GraphModule,
    kinds: Sequence[Any],
    config: CompilerConfig,
    name: str,
    device: torch.device,
    tensorified: Tensorified | None,
    stats: BackendStats,
    specialize: Callable[[object, Sequence[object]], CompiledFn] | None,
    guarded: list[bool] | None = None,
) -> CompiledFn:
    """A graph runner for ``replayed``, registered in ``stats``, as the plain function to call."""
    from npu_mempool import GraphRunner

    runner = GraphRunner(
        replayed,
        input_kinds=kinds,
        options=capture_options(config),
        specialize=specialize,
        name=name,
        guarded=guarded,
    )
    stats.captured += 1
    stats.record_runner(runner)
    _report(name, kinds, tensorified, guarded is not None, specialize is not None, prepared)
    # The runner as a plain function: what Dynamo calls on every step, so the cheapest form.
    function = runner.as_function()
    if tensorified is not None:
        function = tensorified.wrap(function, device)
    return function


def capture_pieces(
    gm: torch.fx.GraphModule,
    splits: list[Split],
    kinds: Sequence[Any],
    config: CompilerConfig,
    name: str,
    device: torch.device,
    stats: BackendStats,
) -> CompiledFn | None:
    """The graph as captured pieces with its split nodes between them, logged and counted."""
    made = piecewise(gm, splits, kinds, config, name, device, stats)
    if made is None:
        return None
    split_gm, pieces = made
    chosen = all(s.reason is FallbackReason.SPLITTING_OPS for s in splits)
    logger.log(
        logging.INFO if chosen else logging.WARNING,
        "FX graph %s captured in %d piece(s); run eagerly between them: %s",
        name,
        pieces,
        "; ".join(s.describe() for s in splits),
    )
    stats.captured += 1
    stats.record_split(name, pieces, tuple(s.describe() for s in splits))
    _logs.dump_graph(name, split_gm)
    return forward_of(split_gm)


def nothing_to_capture(splits: list[Split]) -> tuple[FallbackReason, str]:
    """The fallback of a graph whose pieces are all too small to capture."""
    first = splits[0]
    where = "; ".join(s.describe() for s in splits)
    return (
        first.reason,
        f"no piece worth capturing is left around the nodes that must run eagerly: {where}",
    )


def _report(
    name: str,
    kinds: Sequence[Any],
    tensorified: Any,
    bypass: bool,
    static_kernels: bool,
    prepared: torch.fx.GraphModule,
) -> None:
    counts = {kind: sum(1 for k in kinds if k is kind) for kind in dict.fromkeys(kinds)}
    classes = ", ".join(f"{n} {kind.name.lower()}" for kind, n in counts.items())
    logger.info(
        "FX graph %s: %d inputs (%s) captured per graph key%s",
        name,
        len(kinds),
        classes or "none",
        " with static kernels" if static_kernels else "",
    )
    logger.debug(
        "FX graph %s: input classes %s; ints passed as device scalars at %s; AOT wrapper %s",
        name,
        [kind.name for kind in kinds],
        list(tensorified.inputs) if tensorified is not None else [],
        "skipped" if bypass else "kept",
    )
    _logs.dump_graph(name, prepared)
