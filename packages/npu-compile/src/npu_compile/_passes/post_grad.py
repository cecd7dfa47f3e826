"""Passes on the AOT (post-grad) graph before capture, in TorchAir's order.

:func:`run_post_grad_passes`: ``post_grad_custom_pre_pass`` -> no-op removal
(``experimental_config.remove_noop_ops``) -> ``post_grad_custom_post_pass``. Then, once the
graph has its stream fork/join pairs (and its int inputs their device scalars), :func:`finish`:
reinplacing of functional ops whose input dies (``debug.aclgraph.
disable_reinplace_inplaceable_ops_pass``) and of copies back into mutated inputs
(``debug.aclgraph.disable_reinplace_input_mutated_ops_pass``) -> graph dump
(``debug.graph_dump``). TorchAir also reinplaces after the user's post pass, right before
capture.

No built-in pass may specialise a symbolic size: one that would add a guard on a size is skipped
for that graph (see :func:`npu_compile._torch_compat.no_new_guards`).

Which passes run is read from the lowered :class:`~npu_compile._settings.Settings` and, for the
reinplacing of intermediates, from the graph's plan (the planner turns it off for pieces and, as
in TorchAir, for graphs with stream scopes or events; the input-mutation pass runs there too).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from npu_compile import _torch_compat
from npu_compile._passes import reinplace as _reinplace
from npu_compile._settings import Dump, Settings, UserPass
from npu_compile.errors import BackendError

if TYPE_CHECKING:
    from npu_compile._passes.check import PassTrail

__all__ = ["check_decompositions", "finish", "run_post_grad_passes"]

logger = logging.getLogger("npu_compile")

Decompositions = Mapping[Any, Callable[..., Any]]


def check_decompositions(decompositions: object) -> dict[Any, Callable[..., Any]]:
    """Validate ``get_npu_backend(custom_decompositions=...)``: ``{op: function}`` or ``None``."""
    if decompositions is None:
        return {}
    if not isinstance(decompositions, Mapping):
        raise BackendError(
            f"custom_decompositions must be a dict {{op overload: function}}, got "
            f"{type(decompositions).__name__}; e.g. {{torch.ops.aten.gelu.default: my_gelu}}"
        )
    for op, function in decompositions.items():
        if not isinstance(op, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            raise BackendError(
                f"custom_decompositions key {op!r} is not an ATen operator; use an overload such "
                "as torch.ops.aten.gelu.default"
            )
        if not callable(function):
            raise BackendError(
                f"custom_decompositions[{op}] must be a function computing the op, got "
                f"{type(function).__name__}"
            )
    return dict(decompositions)


def _user_pass(
    user_pass: UserPass, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> torch.fx.GraphModule:
    name = user_pass.name
    try:
        result = user_pass(gm, example_inputs)
    except Exception as error:
        # The user's code failed: say so, rather than let it pass for a graph AOT cannot trace.
        first = str(error).splitlines()[0] if str(error) else ""
        raise BackendError(f"{name} raised {type(error).__name__}: {first}") from error
    if isinstance(result, torch.fx.GraphModule):
        gm = result
    elif result is not None:
        raise BackendError(
            f"{name} returned {type(result).__name__}; a pass edits the GraphModule in place and "
            "returns None (or returns a GraphModule)"
        )
    try:
        gm.graph.lint()
    except Exception as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise BackendError(f"{name} left an invalid graph: {first}") from None
    gm.recompile()
    logger.debug("after %s:\n%s", name, gm.code)
    return gm


def _remove_noop_ops(gm: torch.fx.GraphModule) -> None:
    from torch._inductor.fx_passes.post_grad import remove_noop_ops

    remove_noop_ops(gm.graph)


def _dump_graph(gm: torch.fx.GraphModule, dump: Dump | None, name: str) -> None:
    if dump is None:
        return
    import os
    import tempfile

    target = dump.path_for(name)
    text = gm.code if dump.kind == "py" else str(gm.graph)
    folder = os.path.dirname(target) or "."
    os.makedirs(folder, exist_ok=True)
    # Atomic: a reader never sees half a dump.
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".dump-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise
    logger.info("graph dump of %s written to %s", name, target)


def run_post_grad_passes(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    settings: Settings,
    name: str = "graph",
    trail: PassTrail | None = None,
) -> torch.fx.GraphModule:
    """Run the user passes and no-op removal on an AOT forward graph.

    Args:
        gm: The AOT graph (edited in place where possible).
        example_inputs: Its example inputs (fake tensors, SymInts).
        settings: The lowered options.
        name: Name of the graph, for logs.
        trail: Where the graph is recorded around each pass (``debug.aclgraph.check_passes``).

    Returns:
        ``gm`` or the GraphModule a user pass returned.

    Raises:
        BackendError: A user pass raised, returned something else than ``None`` or a
            GraphModule, or left a malformed graph.
    """
    if settings.pre_pass is not None:
        gm = _user_pass(settings.pre_pass, gm, example_inputs)
    if trail is not None:
        trail.start(gm)
    if settings.remove_noop_ops:
        shape_env = _shape_env(example_inputs)
        _guarded(gm, name, "remove_noop_ops", lambda: _remove_noop_ops(gm), shape_env)
        if trail is not None:
            trail.after("remove_noop_ops", gm)
    if settings.post_pass is not None:
        gm = _user_pass(settings.post_pass, gm, example_inputs)
        if trail is not None:
            trail.start(gm)  # the user's pass is not ours to check
    return gm


def _shape_env(example_inputs: Sequence[Any]) -> Any:
    from torch._guards import TracingContext, detect_fake_mode

    context = TracingContext.try_get()
    fake_mode = context.fake_mode if context is not None else None
    if fake_mode is None:
        fake_mode = detect_fake_mode(list(example_inputs))
    return getattr(fake_mode, "shape_env", None)


def _guarded(
    gm: torch.fx.GraphModule,
    name: str,
    pass_name: str,
    run: Callable[[], object],
    shape_env: Any = None,
) -> None:
    # Built-in passes only save memory and copies: one that cannot handle a graph (fake
    # propagation through a host read, an op it does not know) or that would specialise a
    # symbolic size leaves the graph as it was.
    backup = gm.graph.__deepcopy__()
    try:
        with _torch_compat.no_new_guards(shape_env):
            run()
        gm.graph.lint()
    except _torch_compat.NewGuardError as error:
        logger.debug("%s: %s pass skipped, it would specialise a size (%s)", name, pass_name, error)
        gm.graph = backup
    except Exception as error:
        reason = f"{type(error).__name__}: {error}"
        logger.debug("%s: %s pass skipped (%s)", name, pass_name, reason)
        gm.graph = backup
    gm.recompile()


def finish(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    settings: Settings,
    reinplace_intermediates: bool,
    name: str = "graph",
    trail: PassTrail | None = None,
) -> None:
    """Reinplace and dump the graph that will run, in place.

    Args:
        gm: The graph about to be captured or run.
        example_inputs: Its example inputs.
        settings: The lowered options.
        reinplace_intermediates: Whether the plan lets functional ops write into dead
            intermediates.
        name: Name of the graph, for logs and dump files.
        trail: Where the graph is recorded after each pass (``debug.aclgraph.check_passes``).
    """
    mutated = settings.reinplace_input_mutations
    if reinplace_intermediates or mutated:
        shape_env = _shape_env(example_inputs)
        if reinplace_intermediates:
            reinplace = lambda: _reinplace.reinplace_intermediates(gm.graph)  # noqa: E731
            _guarded(gm, name, "reinplace", reinplace, shape_env)
            if trail is not None:
                trail.after("reinplace_intermediates", gm)
        # As in TorchAir, last: it rewrites the copies back into inputs the first pass leaves.
        if mutated:
            reinplace_inputs = lambda: _reinplace.reinplace_input_mutations(gm.graph)  # noqa: E731
            _guarded(gm, name, "input reinplace", reinplace_inputs, shape_env)
            if trail is not None:
                trail.after("reinplace_input_mutations", gm)
    _dump_graph(gm, settings.graph_dump, name)
