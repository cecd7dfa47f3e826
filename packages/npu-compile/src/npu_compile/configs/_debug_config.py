"""``debug``: eager runs, dumps, and the capture switches of ``debug.aclgraph``."""

from __future__ import annotations

from typing import Any

from npu_compile._settings import Dump
from npu_compile.configs._effects import ASCEND, INT64_MAX, NPU_PATTERNS
from npu_compile.configs._options import _Group, _Node, _Option
from npu_compile.configs._validators import (
    boolean,
    callable_or_none,
    int_range,
    mempool_error_mode,
    optional_choice,
    real_path,
)

__all__ = [
    "AclGraphDebugConfig",
    "DataDumpConfig",
    "DebugConfig",
    "FxSummaryConfig",
    "GraphDumpConfig",
]


class AclGraphDebugConfig(_Node):
    """``debug.aclgraph``: capture and memory policies.

    Attributes:
        disable_reinplace_inplaceable_ops_pass: ``True`` keeps functional ops functional (no
            rewrite of ``out = op(x)`` into ``op_(x)`` where ``x`` is dead afterwards).
        disable_reinplace_input_mutated_ops_pass: ``True`` keeps "functional op + copy back into a
            mutated input" as is instead of one in-place op on the input (KV-cache writes).
        disable_mempool_reuse_in_same_fx: ``True`` turns off memory reuse between the graphs of
            one FX graph (mode 2; default ``False`` = reuse on).
        enable_output_clone: Clone outputs before returning them, so they survive later replays.
        static_capture_size_limit: Most graphs one FX graph may capture (default 64); past it the
            FX graph runs eagerly with one warning and its graphs are freed.
        clone_input: Copy user inputs into graph-owned buffers with one batched copy per call
            (mode 3; default ``True``). ``False`` captures the caller's own tensors.
        remove_cat_ops: TorchAir rewrites ``cat`` of Ascend ops with ``out=`` variants into
            writes into one buffer; accepted, no effect here.
        check_output_overwrite: Debug aid: reading an output that a later replay overwrote raises
            a clear error instead of returning wrong numbers (npu-compile extension).
        strict: Raise instead of falling back to eager when a graph cannot be captured
            (npu-compile extension; default ``False``: one logged reason, then eager).
        keep_held_outputs: ``True`` keeps every output the caller still holds until an explicit
            step boundary (``npu_compile.mark_step_begin()``): a call that needs its memory takes
            a second call path with a pool of its own, so ``out = model(x)`` in a loop holds two
            graphs' memory. Default ``False``: each call of the compiled function begins a new
            step (unless a backward is pending), as with CUDA Graph Trees; outputs of earlier
            steps may be overwritten and raise ``StaleOutputError`` when read (npu-compile
            extension).
        force_recapture: npugraph_ex's ``force_recapture``, a debugging aid: every call frees
            its graph and captures it anew (slow by design), so a stale capture can be told from
            a wrong computation.
        capture_error_mode: npugraph_ex's ``capture_error_mode``: which calls of other threads
            invalidate a device capture in progress (``"global"``: any thread's unsafe calls;
            ``"thread_local"``: the capturing thread's; ``"relaxed"``: none). The default is
            ``"thread_local"``, as CUDA Graph Trees use, not npugraph_ex's ``"global"``: under
            ``"global"`` a serving thread that allocates while another captures breaks that
            capture.
        check_passes: Debug aid: at each graph's first call, run the graph as it was before
            each of npu-compile's passes and after it on copies of the call's inputs, and raise
            :class:`~npu_compile.PassCheckError` naming the pass and the first node whose value
            differs where a pass changed an output or a mutated input (npu-compile extension;
            one more run of the graph per pass at the first call).
    """

    disable_reinplace_inplaceable_ops_pass = _Option(
        False,
        boolean,
        "no reinplacing of functional ops",
        key="inplace_pass",
        inverted=True,
        note="a functional op on an intermediate writes in place only where no later op (nor the "
        "graph's outputs, which a training graph's backward reads) reads that memory through any "
        "view or alias, as the ops' schemas say, no other operand overlaps it and the result "
        "keeps its layout; skipped for graphs with stream scopes/events",
    )
    disable_reinplace_input_mutated_ops_pass = _Option(
        False,
        boolean,
        "no reinplacing of copies back into mutated inputs",
        key="input_inplace_pass",
        inverted=True,
        note="op + copy back into an input becomes the in-place op; runs with stream "
        "scopes/events too, as in TorchAir",
    )
    disable_mempool_reuse_in_same_fx = _Option(
        False,
        boolean,
        "no pool reuse inside one FX graph",
        key="reuse_graph_pool_in_same_fx",
        inverted=True,
        note="mode 2 off",
    )
    enable_output_clone = _Option(
        False,
        boolean,
        "clone outputs before return",
        key="clone_output",
        note="clone outputs before returning them, so they survive later replays",
    )
    static_capture_size_limit = _Option(
        64,
        int_range(1, INT64_MAX),
        "max graphs per FX graph",
        key="capture_limit",
        example=8,
        note="then eager with one warning",
    )
    clone_input = _Option(
        True, boolean, "copy user inputs into graph buffers", key="clone_input", note="mode 3"
    )
    remove_cat_ops = _Option(
        True, boolean, "rewrite cat of out= ops", effect=NPU_PATTERNS, key="remove_cat_ops"
    )
    check_output_overwrite = _Option(
        False,
        boolean,
        "detect reads of overwritten outputs",
        key="check_output_overwrite",
        note="npu-compile extension",
    )
    strict = _Option(
        False,
        boolean,
        "raise instead of falling back to eager",
        key="strict",
        note="npu-compile extension",
    )
    keep_held_outputs = _Option(
        False,
        boolean,
        "never overwrite an output the caller holds",
        key="keep_held_outputs",
        note="npu-compile extension: `True` never overwrites an output the caller holds (the "
        "policy before one step per call)",
    )
    force_recapture = _Option(
        False,
        boolean,
        "recapture on every call",
        key="force_recapture",
        note="npugraph_ex option, a debugging aid: every call frees its graph and captures it "
        'anew (recapture reason `"forced"`)',
    )
    capture_error_mode = _Option(
        "thread_local",
        mempool_error_mode,
        "capture error mode",
        key="capture_error_mode",
        example="relaxed",
        note="npugraph_ex option, passed to the device capture; the default is CUDA Graph Trees' "
        '`"thread_local"`, not npugraph_ex\'s `"global"` (under `"global"` a serving thread that '
        "allocates while another captures breaks that capture)",
    )
    check_passes = _Option(
        False,
        boolean,
        "check that each graph pass keeps the graph's values",
        key="check_passes",
        note="npu-compile extension, a debugging aid: at each graph's first call, runs the graph "
        "before and after each of npu-compile's passes on copies of the inputs and raises "
        "`PassCheckError` naming the pass and the first node whose value differs",
    )


class _DumpBase(_Node):
    # TorchAir keeps the folder in `_path` (with `path` as its property); scripts use either.
    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__("path" if name == "_path" else name, value)

    def __getattribute__(self, name: str) -> Any:
        if name == "_path":
            return object.__getattribute__(self, "__dict__").get("path")
        return super().__getattribute__(name)

    def full_path(self, name: str) -> str | None:
        """Where a dump named ``name`` goes (TorchAir's naming), or ``None`` when off."""
        kind = self.__dict__["type"]
        if kind is None:
            return None
        return Dump(str(kind), self.__dict__.get("path") or ".").path_for(name)

    @property
    def enabled(self) -> bool:
        """Whether a dump type is set."""
        return self.__dict__["type"] is not None


class GraphDumpConfig(_DumpBase):
    """``debug.graph_dump``: write each compiled graph to a file.

    Attributes:
        type: ``"py"`` (the graph's Python code) or ``"txt"`` (its node listing): written for
            every FX graph after the passes; ``"pbtxt"`` is GE's format (no effect here).
        path: Folder of the dumps (default: current directory).
    """

    type = _Option[str | None](
        None,
        optional_choice("txt", "pbtxt", "py"),
        "graph dump format",
        example="py",
        note='`"py"` / `"txt"` write each AOT graph after the passes; `"pbtxt"` (GE format) '
        "warns, no effect",
    )
    path = _Option[str | None](
        None,
        real_path,
        "graph dump folder",
        example="<dir>",
        note="folder of the dumps (also `_path`)",
    )


class DataDumpConfig(_DumpBase):
    """``debug.data_dump``: run graphs eagerly and save every operator's inputs and outputs.

    Attributes:
        type: ``"npy"`` turns the dump on: graphs are not captured, and each call writes one
            ``.npy`` per operator input and output under
            ``<path>/worldsize1_global_rank0/<graph>/<call>/``.
        path: Folder of the dumps (default: current directory).
        filter: ``fn(node) -> node or None``; only the FX nodes it returns are dumped.
    """

    type = _Option[str | None](
        None,
        optional_choice("npy"),
        "eager data dump",
        example="npy",
        note='`"npy"`: graphs run eagerly (no capture) and every operator\'s inputs and outputs '
        "are saved per call",
    )
    path = _Option[str | None](
        None,
        real_path,
        "data dump folder",
        example="<dir>",
        note="folder of the dumps (also `_path`)",
    )
    filter = _Option[object](
        None,
        callable_or_none,
        "data dump filter",
        example="<fn>",
        note="`fn(node) -> node or None`: which operators are dumped",
    )


class FxSummaryConfig(_DumpBase):
    """``debug.fx_summary``: the operator statistics of each FX graph, as CSV.

    Attributes:
        type: ``"csv"`` writes one file per FX graph (AOT's graph after the passes): a row per
            operator with its count and the input dtypes and shapes of its first use.
        skip_compile: Then run the graph eagerly instead of capturing it (TorchAir skips GE's
            compilation after the summary).
        path: Folder of the summaries (default: current directory; also ``_path``).
    """

    type = _Option[str | None](
        None,
        optional_choice("csv"),
        "fx summary",
        example="csv",
        note='`"csv"`: each AOT graph\'s operator counts and first-use input shapes, one file '
        "per graph",
    )
    skip_compile = _Option(
        True,
        boolean,
        "skip compilation after the summary",
        note="with a summary, run the graph eagerly instead of capturing it",
    )
    path = _Option[str | None](
        None,
        real_path,
        "fx summary folder",
        example="<dir>",
        note="folder of the summaries (also `_path`)",
    )


class DebugConfig(_Node):
    """``debug``: debugging switches.

    Attributes:
        graph_dump: :class:`GraphDumpConfig`.
        data_dump: :class:`DataDumpConfig`.
        fx_summary: :class:`FxSummaryConfig`.
        run_eagerly: Run the whole reduce-overhead pipeline (AOT graph, stream pass, static
            kernels) but call the graph directly instead of capturing and replaying it.
        aclgraph: Capture and memory policies (:class:`AclGraphDebugConfig`).
        deadlock_check: TorchAir's device deadlock watchdog; accepted, no effect here.
    """

    graph_dump = _Group(GraphDumpConfig)
    data_dump = _Group(DataDumpConfig)
    fx_summary = _Group(FxSummaryConfig)
    run_eagerly = _Option(
        False,
        boolean,
        "run the pipeline without capture",
        key="force_eager",
        note="whole pipeline, no capture",
    )
    aclgraph = _Group(AclGraphDebugConfig)
    deadlock_check = _Option(False, boolean, "deadlock check", effect=ASCEND, key="deadlock_check")
