"""`CompilerConfig`: the TorchAir option tree for the features npu-compile implements.

The names and defaults follow TorchAir's ``torchair.configs.compiler_config.CompilerConfig`` so a
script ports by changing its import. Every assignment is validated on the spot. The groups live in
modules of their own (``_debug_config``, ``_experimental_config``, ``_export_config``, and
``_ascend_config`` for the GE and Ascend runtime groups that have no effect here).
"""

from __future__ import annotations

from collections.abc import Mapping

from npu_compile.configs._ascend_config import (
    AoeConfig,
    DumpConfig,
    FusionConfig,
    GeConfig,
    InferenceConfig,
)
from npu_compile.configs._debug_config import DebugConfig
from npu_compile.configs._experimental_config import ExperimentalConfig
from npu_compile.configs._export_config import CompilerExportConfig
from npu_compile.configs._options import _Group, _Node, _Option
from npu_compile.configs._validators import (
    boolean,
    callable_or_none,
    choice,
    dim_or_none,
    op_names,
    pool_handle,
    sizes_or_none,
)
from npu_compile.errors import ConfigError, UnknownOptionError

__all__ = ["CompilerConfig", "NPUGRAPH_EX_OPTIONS"]


class AclGraphConfig(_Node):
    """``aclgraph_config``: where captured graphs take their memory, and what they capture.

    Attributes:
        use_custom_pool: A pool every graph compiled with this config captures into, across FX
            graphs (mode 1): ``npu_compile.graph_pool_handle()``, or the tuple
            ``torch.npu.graph_pool_handle()`` / ``torch.cuda.graph_pool_handle()`` returns (the
            same tuple means the same pool). Setting it turns pool reuse inside one FX graph
            (mode 2) off. ``None`` (default): one pool per FX graph.
        piecewise: Split a graph around the operators that cannot be captured on its device
            (host syncs such as ``.item()``, operators on another device, operators tagged
            ``torch.Tag.cudagraph_unsafe``) and around ``splitting_ops``; capture the pieces into
            one pool and run those operators eagerly between them (npu-compile extension;
            default ``True``). ``False``: such a graph runs eagerly as a whole.
        splitting_ops: Operators to leave out of the captured pieces and run eagerly, by name
            (``"aten::softmax"``, ``"vllm::unified_attention"``), as vLLM's ``splitting_ops``
            (npu-compile extension; default none).
        capture_sizes: Batch sizes to capture, as vLLM's ``cudagraph_capture_sizes``
            (npu-compile extension; default ``None``: one graph per size seen). With a list, a
            graph whose batch dimension is dynamic pads each call up to the nearest listed
            size (the padding rows copy the first row), replays, and cuts the outputs back; a
            larger batch runs eagerly. Each size is captured when a call first needs it, into
            the graph's pool. A graph is padded only where that is proven to give its unpadded
            numbers: every output row depends only on the same input row (elementwise ops,
            matrix products, embeddings, norms, softmax and attention over other dimensions,
            views that keep the batch leading, indexing by ``arange(batch)``), no input is
            updated in place, and only sizes the graph's guards admit are used (a graph traced
            at batch 1 stays at 1). Any other graph (batch statistics, a reduction, scan, sort,
            flip or index along the batch, a buffer update) is captured per exact size after
            one log line naming the node; a ``ConfigError`` under ``debug.aclgraph.strict``.
        capture_sizes_dim: Which dimension of the graph's input tensors is the batch that
            ``capture_sizes`` pads (npu-compile extension; default ``None``: the dimensions
            marked with ``torch._dynamo.mark_dynamic``, or dimension 0 where nothing is
            marked). Set it for inputs that are not batch-first, such as ``(seq, batch,
            hidden)``: ``1``. Every input dimension of that size is padded; a graph where the
            batch size is also the size of another dimension (3 prompts of 3 tokens under
            ``dynamic=True``) is not padded.
    """

    use_custom_pool = _Option[object](
        None,
        pool_handle,
        "shared pool (mode 1)",
        key="use_graph_pool",
        example=(11, 0),  # the tuple torch.npu.graph_pool_handle() returns
        note="mode 1: `npu_compile.graph_pool_handle()` or the tuple of "
        "`torch.npu.graph_pool_handle()` / `torch.cuda.graph_pool_handle()` (same tuple, same "
        "pool)",
    )
    piecewise = _Option(
        True,
        boolean,
        "split around operators that cannot be captured",
        note="npu-compile extension: split around what cannot be captured; `False`: such graphs "
        "run eagerly whole",
    )
    splitting_ops = _Option[tuple[str, ...]](
        (),
        op_names,
        "operators run eagerly between pieces",
        key="splitting_ops",
        example=["aten::relu"],
        note="npu-compile extension: operator names run eagerly between pieces, as vLLM's "
        "`splitting_ops`",
    )
    capture_sizes = _Option[tuple[int, ...] | None](
        None,
        sizes_or_none,
        "batch sizes to capture",
        key="capture_sizes",
        example=[2, 4],
        note="npu-compile extension: batch sizes to capture; calls are padded up to the nearest, "
        "as vLLM's `cudagraph_capture_sizes`",
    )
    capture_sizes_dim = _Option[int | None](
        None,
        dim_or_none,
        "the batch dimension to pad",
        example=1,
        note="npu-compile extension: the input dimension `capture_sizes` pads; default: the "
        "dimension marked with `mark_dynamic`, else 0",
    )


class CompilerConfig(_Node):
    """Options of the npu-compile backend, in TorchAir's tree.

    Every option path of TorchAir's ``CompilerConfig`` exists with its name, type checks and
    default (except ``mode``, whose default here is ``"reduce-overhead"``). Options that have no
    meaning off Ascend are accepted and make the backend warn once, naming why; the README lists
    each option's status. Reads give the value itself (``config.debug.run_eagerly`` is falsy);
    strings, ints and booleans also carry TorchAir's ``.value`` (``config.mode.value``,
    ``config.debug.aclgraph.clone_input.value == "1"``), which can be assigned too.

    Assignment validates: an unknown name raises :class:`~npu_compile.errors.UnknownOptionError`
    (a ``ValueError`` and an ``AttributeError``) naming the valid options and the closest match; a
    wrong type or value raises :class:`~npu_compile.errors.ConfigError` naming what is allowed.
    Configs compare equal and hash by value, so they can key caches.

    Attributes:
        mode: ``"reduce-overhead"`` (default; capture and replay). ``"npugraph_ex"`` is accepted as
            its TorchAir alias. ``"max-autotune"`` (GE graph mode) is accepted here and refused by
            :func:`~npu_compile.get_npu_backend`, which says what to use instead.
        post_grad_custom_pre_pass: ``fn(gm, example_inputs, config)`` run on each AOT graph
            before npu-compile's own passes (edit ``gm`` in place, or return a new GraphModule).
        post_grad_custom_post_pass: The same, run after them, right before capture.
        aclgraph_config: :class:`AclGraphConfig`.
        debug: :class:`DebugConfig`.
        experimental_config: :class:`ExperimentalConfig`.
        export: :class:`CompilerExportConfig`.
        aoe_config, dump_config, fusion_config, inference_config, ge_config: GE and Ascend
            runtime options, accepted with no effect here.

    Example:
        >>> from npu_compile import CompilerConfig
        >>> config = CompilerConfig()
        >>> config.mode = "reduce-overhead"
        >>> config.debug.aclgraph.enable_output_clone = True
        >>> config.mode.value
        'reduce-overhead'
    """

    mode = _Option(
        "reduce-overhead",
        choice("reduce-overhead", "npugraph_ex", "max-autotune"),
        "graph mode",
        example="npugraph_ex",
        note='default here `"reduce-overhead"` (TorchAir: `"max-autotune"`); `"npugraph_ex"` = '
        'reduce-overhead; `"max-autotune"` accepted here, refused by `get_npu_backend` (GE), '
        "which says to use reduce-overhead or `dynamo_export`",
    )
    post_grad_custom_pre_pass = _Option[object](
        None,
        callable_or_none,
        "pass before ours",
        key="post_grad_custom_pre_pass",
        example="<fn>",
        note="`fn(gm, example_inputs, config)` on each AOT graph, first",
    )
    post_grad_custom_post_pass = _Option[object](
        None,
        callable_or_none,
        "pass after ours",
        key="post_grad_custom_post_pass",
        example="<fn>",
        note="same, after no-op removal; reinplacing and capture follow, as in TorchAir",
    )
    debug = _Group(DebugConfig)
    aoe_config = _Group(AoeConfig)
    export = _Group(CompilerExportConfig)
    dump_config = _Group(DumpConfig)
    fusion_config = _Group(FusionConfig)
    experimental_config = _Group(ExperimentalConfig)
    inference_config = _Group(InferenceConfig)
    ge_config = _Group(GeConfig)
    aclgraph_config = _Group(AclGraphConfig)

    def __init__(self) -> None:
        super().__init__("")

    def _unknown(self, name: str) -> UnknownOptionError:
        if name == "npugraphex_config":
            return UnknownOptionError(
                "CompilerConfig has no npugraphex_config: TorchAir keeps a process-wide mirror "
                "of torch.compile(options=...) there; pass options= to torch.compile, or set the "
                "config paths the keys map to (npu_compile.configs.compiler_config."
                "NPUGRAPH_EX_OPTIONS)"
            )
        return super()._unknown(name)

    def with_options(self, options: Mapping[str, object] | None) -> CompilerConfig:
        """Return a copy with ``torch.compile(..., options={...})`` keys applied.

        The keys are TorchAir's npugraph_ex option names (see :data:`NPUGRAPH_EX_OPTIONS` for
        the mapping onto this tree).

        Args:
            options: ``{option name: value}``.

        Returns:
            A new config; this one is unchanged.

        Raises:
            UnknownOptionError: An option name is not known.
            ConfigError: ``options`` is not a mapping, or a value is not allowed.
        """
        import difflib

        if not isinstance(options, Mapping):
            raise ConfigError(
                f"torch.compile options must be a dict of npugraph_ex option names to values, got "
                f"{type(options).__name__}; pass options={{'clone_output': True}} or leave it out"
            )
        result = self.copy()
        for name, value in options.items():
            key: object = name  # callers outside mypy may pass any key
            if not isinstance(key, str) or key not in NPUGRAPH_EX_OPTIONS:
                names = sorted(NPUGRAPH_EX_OPTIONS)
                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise UnknownOptionError(
                    f"torch.compile options: unknown key {key!r}.{hint} "
                    f"Valid keys: {', '.join(names)}."
                )
            path, inverted = NPUGRAPH_EX_OPTIONS[key]
            if inverted:
                if not isinstance(value, bool):
                    raise ConfigError(
                        f"torch.compile options: {key} must be True or False, got {value!r}"
                    )
                value = not value
            result.set(path, value)
        return result


def _keys() -> dict[str, tuple[str, bool]]:
    keys: dict[str, tuple[str, bool]] = {}
    for path, option in CompilerConfig._option_paths():
        if option.key is None:
            continue
        if option.key in keys:
            raise TypeError(f"torch.compile key {option.key!r} is declared twice: {path}")
        keys[option.key] = (path, option.inverted)
    return keys


#: TorchAir's ``torch.compile(options={...})`` keys (npugraph_ex's, vLLM's ``splitting_ops`` and
#: npu-compile's own) -> (the ``CompilerConfig`` path each sets, whether the key means the
#: opposite of a boolean option). Built from the options' declarations (their ``key=``).
NPUGRAPH_EX_OPTIONS: dict[str, tuple[str, bool]] = _keys()
