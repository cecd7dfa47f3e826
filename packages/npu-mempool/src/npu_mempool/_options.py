"""Input classes and capture options of a :class:`~npu_mempool.GraphRunner`."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from npu_mempool.errors import ConfigError

if TYPE_CHECKING:
    from npu_mempool._pool import PoolHandle

__all__ = ["CaptureOptions", "InputKind"]


class InputKind(enum.Enum):
    """How a positional tensor argument of a captured callable is treated.

    Attributes:
        PARAMETER: Parameters and buffers. Never copied; the address seen at capture is recorded
            and a later call with another address recaptures that graph, unless
            ``CaptureOptions.frozen_parameters`` promises that addresses never change. A tensor
            that is no ``nn.Parameter`` at the first call (a buffer, a slice of one) is keyed on
            its shape, dtype and strides too, since slices of one buffer share an address.
        MUTATED: Inputs updated in place by the graph (a KV cache, a step counter). Never copied, so
            the update lands in the caller's tensor; a new address captures a graph for it (reason
            ``"mutated_input_moved"``). While the tensors of the old graph still live (two model
            instances, each with its cache), the old graph is kept and alternating replays; once
            one of them died (a replaced cache), the old graph is freed.
        USER: Everything else. Copied into a static buffer before every replay (see
            ``CaptureOptions.clone_input``).
    """

    PARAMETER = "parameter"
    MUTATED = "mutated"
    USER = "user"


#: The capture error modes of the device graph APIs (``torch.cuda.graph``, ``torch.npu.graph``).
CAPTURE_ERROR_MODES = ("global", "thread_local", "relaxed")

_BOOLEAN_FIELDS = (
    "reuse_pool_across_shapes",
    "clone_input",
    "clone_output",
    "check_output_overwrite",
    "frozen_parameters",
    "strict",
    "keep_held_outputs",
    "force_recapture",
)


@dataclass(frozen=True)
class CaptureOptions:
    """Memory and capture policy of one :class:`~npu_mempool.GraphRunner`.

    The names follow TorchAir's ``aclgraph`` options; the TorchAir spelling is given per field.

    Attributes:
        pool: Mode 1 (``aclgraph_config.use_custom_pool``). Every graph of every runner given this
            handle captures into it, so runners share memory. Setting it turns mode 2 off.
        reuse_pool_across_shapes: Mode 2 (the inverse of
            ``debug.aclgraph.disable_mempool_reuse_in_same_fx``). The graphs of one runner share one
            pool and each new capture rewinds the pool to the state it had before the first one, so
            the memory of all shapes is about that of the largest, not the sum. The price: replaying
            one shape overwrites the outputs of the others.
        clone_input: Mode 3 (``debug.aclgraph.clone_input``). User inputs are copied into buffers
            allocated from the graph pool with one batched copy per call. When ``False`` the first
            tensor passed at capture is itself captured, and a later call with another tensor
            copies that tensor's data *into the first tensor*, overwriting it. A first tensor
            whose elements share memory (an expanded tensor) cannot take a copy and gets a pool
            buffer as with ``True``.
        clone_output: ``debug.aclgraph.enable_output_clone``. Return clones of the outputs so that a
            caller can hold them across later calls, at the cost of one allocation and copy per
            output per call.
        check_output_overwrite: Check the callers of static bound graphs
            (``GraphRunner.bind(static_outputs=True)``): each call hands out new tensors and
            poisons the previous call's, so reading an output after the next call raises
            :class:`~npu_mempool.StaleOutputError`; for tests. Elsewhere there is nothing left to
            detect: outputs still in use are never overwritten within their step, and reading one
            overwritten after its step raises :class:`~npu_mempool.StaleOutputError`.
        capture_limit: ``debug.aclgraph.static_capture_size_limit``. When a new graph would exceed
            it, the runner warns once, frees its graphs and runs eagerly from then on.
        frozen_parameters: Promise that PARAMETER inputs never change address, which removes their
            per-call address check.
        strict: Raise :class:`~npu_mempool.CaptureError` when a capture fails instead of logging
            the reason once and running eagerly.
        warmup_runs: Eager calls per new graph key before it is captured. Their results are
            returned as usual. ``None`` (default) takes the device's own need: ``1`` on CUDA, whose
            libraries initialise lazily on first use (cuBLAS workspaces) and must not do so inside
            a capture, ``0`` on NPU (as TorchAir) and on the CPU emulation.
        capture_error_mode: ``debug.aclgraph.capture_error_mode``: which calls of other threads
            invalidate a device capture in progress. ``"thread_local"`` (default, as CUDA Graph
            Trees): only unsafe calls of the capturing thread; ``"global"``: those of any thread
            (the device graph API's own default; serving threads that allocate while another one
            captures then break its capture); ``"relaxed"``: none. The CPU emulation has no such
            errors.
        keep_held_outputs: Keep every output the caller still holds until an explicit step
            boundary (:func:`~npu_mempool.mark_step_begin`): a call that needs its memory takes
            another call path, with a pool of its own (default ``True``: a runner called directly
            cannot tell where its caller's steps begin). ``False`` applies the contract of CUDA
            Graph Trees, as ``torch.compile`` backends want it: each top-level call (a
            :func:`~npu_mempool.top_level_call` block, else a new entry into a
            ``torch.compile``'d function as torch's generation counter shows it) begins a new step
            for its thread, after which the runner may overwrite what it handed out to that
            thread before; reading such an output raises :class:`~npu_mempool.StaleOutputError`.
            Outputs passed back in as arguments stay valid. A step held open
            (:func:`~npu_mempool.hold_step`) begins no new one.
        force_recapture: ``debug.aclgraph.force_recapture``, a debugging aid: every call frees
            the graph of its key and captures it anew (counted as recapture reason
            ``"forced"``), so a suspected stale capture can be told from a wrong computation.
            Slow by design.
    """

    pool: PoolHandle | None = None
    reuse_pool_across_shapes: bool = True
    clone_input: bool = True
    clone_output: bool = False
    check_output_overwrite: bool = False
    capture_limit: int = 64
    frozen_parameters: bool = False
    strict: bool = False
    warmup_runs: int | None = None
    capture_error_mode: str = "thread_local"
    keep_held_outputs: bool = True
    force_recapture: bool = False

    def __post_init__(self) -> None:
        if self.capture_error_mode not in CAPTURE_ERROR_MODES:
            raise ConfigError(
                f"CaptureOptions.capture_error_mode must be one of {', '.join(CAPTURE_ERROR_MODES)}"
                f", got {self.capture_error_mode!r}"
            )
        for name in _BOOLEAN_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, bool):
                # A string such as "yes" or "False" is truthy: it would silently turn a mode on.
                raise ConfigError(f"CaptureOptions.{name} must be True or False, got {value!r}")
        for name in ("capture_limit", "warmup_runs"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"CaptureOptions.{name} must be an int, got {value!r}")
        if self.capture_limit < 1:
            raise ConfigError(
                f"CaptureOptions.capture_limit must be at least 1, got {self.capture_limit}; "
                "to disable capture, call the function directly instead of through a GraphRunner"
            )
        if self.warmup_runs is not None and self.warmup_runs < 0:
            raise ConfigError(
                f"CaptureOptions.warmup_runs must be 0 or more, got {self.warmup_runs}"
            )

    @property
    def rewinds_pool(self) -> bool:
        """Whether captures rewind the pool (mode 2 on and no custom pool)."""
        return self.pool is None and self.reuse_pool_across_shapes
