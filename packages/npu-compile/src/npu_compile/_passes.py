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

As in TorchAir, a graph that uses stream scopes or events keeps the input-mutation pass (an op
whose result is copied back into a graph input writes the input directly, as the copy would)
but skips the pass that reinplaces intermediates: writing in place into an intermediate that
another stream may still be reading would race, and the graph does not say when that stream is
done with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from npu_streams import has_stream_ops

from npu_compile import _reinplace, _torch_compat
from npu_compile.errors import BackendError

if TYPE_CHECKING:
    from npu_compile._passcheck import PassTrail
    from npu_compile.configs.compiler_config import CompilerConfig

__all__ = [
    "run_post_grad_passes",
    "finish",
    "check_decompositions",
    "filter_specializer",
]

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
    name: str,
    function: Callable[..., Any],
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    config: CompilerConfig,
) -> torch.fx.GraphModule:
    try:
        result = function(gm, list(example_inputs), config)
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


def _dump_graph(gm: torch.fx.GraphModule, config: CompilerConfig, name: str) -> None:
    dump = config.debug.graph_dump
    kind = dump.get("type")
    if kind not in ("py", "txt"):
        return
    import os
    import tempfile

    target = dump.full_path(name)
    assert target is not None
    text = gm.code if kind == "py" else str(gm.graph)
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
    config: CompilerConfig,
    name: str = "graph",
    trail: PassTrail | None = None,
) -> torch.fx.GraphModule:
    """Run the user passes and no-op removal on an AOT forward graph.

    Args:
        gm: The AOT graph (edited in place where possible).
        example_inputs: Its example inputs (fake tensors, SymInts).
        config: The options.
        name: Name of the graph, for logs.
        trail: Where the graph is recorded around each pass (``debug.aclgraph.check_passes``).

    Returns:
        ``gm`` or the GraphModule a user pass returned.

    Raises:
        BackendError: A user pass raised, returned something else than ``None`` or a
            GraphModule, or left a malformed graph.
    """
    pre = config.get("post_grad_custom_pre_pass")
    if pre is not None:
        assert callable(pre)
        gm = _user_pass("post_grad_custom_pre_pass", pre, gm, example_inputs, config)
    if trail is not None:
        trail.start(gm)
    if config.experimental_config.remove_noop_ops:
        shape_env = _shape_env(example_inputs)
        _guarded(gm, name, "remove_noop_ops", lambda: _remove_noop_ops(gm), shape_env)
        if trail is not None:
            trail.after("remove_noop_ops", gm)
    post = config.get("post_grad_custom_post_pass")
    if post is not None:
        assert callable(post)
        gm = _user_pass("post_grad_custom_post_pass", post, gm, example_inputs, config)
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
    config: CompilerConfig,
    name: str = "graph",
    trail: PassTrail | None = None,
) -> None:
    """Reinplace and dump the graph that will run, in place.

    With stream scopes or events in the graph only the input-mutation pass runs (see the module
    docstring).

    Args:
        gm: The graph about to be captured or run.
        example_inputs: Its example inputs.
        config: The options.
        name: Name of the graph, for logs and dump files.
        trail: Where the graph is recorded after each pass (``debug.aclgraph.check_passes``).
    """
    aclgraph = config.debug.aclgraph
    functional = not aclgraph.disable_reinplace_inplaceable_ops_pass
    mutated = not aclgraph.disable_reinplace_input_mutated_ops_pass
    if functional and has_stream_ops(gm):
        logger.debug("%s uses stream scopes or events: intermediates are not reinplaced", name)
        functional = False
    if functional or mutated:
        shape_env = _shape_env(example_inputs)
        if functional:
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
    _dump_graph(gm, config, name)


def filter_specializer(
    config: CompilerConfig,
    specialize: Callable[[object, Sequence[object]], Callable[..., Any]] | None,
    generic: Callable[..., Any],
) -> Callable[[object, Sequence[object]], Callable[..., Any]] | None:
    """Apply ``_aclnn_static_shape_kernel_sym_value_range`` / ``_sym_index`` to static kernels.

    With a range set, only graph keys whose symbolic size number ``_sym_index`` (counting the
    integer arguments of the graph in order) is in the range get static kernels; the others run
    the generic graph.
    """
    static = config.experimental_config.aclgraph
    allowed = static.get("_aclnn_static_shape_kernel_sym_value_range")
    if specialize is None or allowed is None:
        return specialize
    assert isinstance(allowed, tuple)
    index = int(static._aclnn_static_shape_kernel_sym_index)
    inner = specialize

    def filtered(key: object, args: Sequence[object]) -> Callable[..., Any]:
        sizes = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
        if index < len(sizes) and sizes[index] in allowed:
            return inner(key, args)
        logger.debug(
            "no static kernels for key %s: symbolic size %d is %s, not in %s",
            key,
            index,
            sizes[index] if index < len(sizes) else "absent",
            allowed,
        )
        return generic

    return filtered
