"""Capture policy of a runner: what a call that found no free graph does, and why.

A call whose graph exists and whose memory is free always replays it (the runner's dispatch).
Every other call asks :class:`CapturePolicy`, which answers with a :class:`Decision`: capture a
graph, run this call eagerly (warm-up, a key whose capture failed), give up capturing for good
(capture limit, churn), or raise (a failed capture under ``strict``). The policy holds the state
those answers need (warm-up counts, failed keys, recent new keys) and does nothing else: the
runner carries the decision out.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from npu_mempool._keys import Layout
from npu_mempool._options import CaptureOptions
from npu_mempool.errors import CaptureChurnWarning, CaptureLimitWarning

__all__ = ["CHURN_LIMIT", "UNREPLAYED_LIMIT", "Action", "CapturePolicy", "Decision", "Reason"]

#: New graphs in a row, with no replay between them, that differ only in non-tensor values: past
#: this many, the value changes on every call and each capture is wasted work.
CHURN_LIMIT = 8
#: Graphs of new keys captured in a row with no replay between them: past this many, the calls
#: bring shapes that never repeat (a growing cache, a new length per call), and each capture
#: costs more than the eager call it would save. New keys then run eagerly until one replays.
UNREPLAYED_LIMIT = 8


class Action(enum.Enum):
    """What the runner does with a call that found no free graph."""

    #: Capture a graph for the call (and return its outputs).
    CAPTURE = "capture"
    #: Run this call eagerly; later calls ask again.
    EAGER = "eager"
    #: Free every graph and run eagerly from now on, after one warning.
    GIVE_UP = "give_up"
    #: Raise :class:`~npu_mempool.CaptureError` (a failed capture under ``strict``).
    RAISE = "raise"


class Reason(enum.Enum):
    """Why the policy decided as it did."""

    NEW_GRAPH = "new_graph"
    WARMUP = "warmup"
    CHURN = "churn"
    CAPTURE_LIMIT = "capture_limit"
    CAPTURE_FAILED = "capture_failed"
    NO_REPLAY = "no_replay"


@dataclass(frozen=True)
class Decision:
    """An answer of :class:`CapturePolicy`.

    Attributes:
        action: What to do.
        reason: Why.
        message: For ``GIVE_UP`` the warning, for ``RAISE`` the error, for a failed capture run
            eagerly, or the first new key run eagerly for want of replays, the log line; empty
            otherwise.
        warning: The warning class ``GIVE_UP`` warns with.
    """

    action: Action
    reason: Reason
    message: str = ""
    warning: type[Warning] | None = None


_CAPTURE = Decision(Action.CAPTURE, Reason.NEW_GRAPH)
_WARMUP = Decision(Action.EAGER, Reason.WARMUP)


class CapturePolicy:
    """Warm-up, churn, capture limit and failure rules of one runner.

    Args:
        options: The runner's options (``warmup_runs``, ``capture_limit``, ``strict``).
    """

    def __init__(self, options: CaptureOptions) -> None:
        self._options = options
        self._warm: dict[Hashable, int] = {}
        #: Keys whose capture failed: they run eagerly for every input set from now on.
        self.failed: set[Hashable] = set()
        # Tensor signature and non-tensor values of the new keys captured since the last replay,
        # and the runner's replay count when the last of them was seen.
        self._misses: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = []
        self._replays = 0
        # Graphs of new keys captured since the last replay, and whether the runner said once
        # that new keys run eagerly for want of replays.
        self._unreplayed = 0
        self._told = False

    def reset(self) -> None:
        """Forget warm-up counts and failed keys (the runner freed its graphs)."""
        self._warm.clear()
        self.failed.clear()

    def on_miss(
        self,
        key: Hashable,
        args: tuple[Any, ...],
        layout: Layout,
        *,
        known: bool,
        graphs: int,
        replays: int,
        make_room: Callable[[], int],
        device_warmup: Callable[[], int],
        name: str,
    ) -> Decision:
        """Decide for a call that found no free graph for ``key``.

        Args:
            key: The call's graph key.
            args: The call's arguments.
            layout: Which argument is what.
            known: Whether a graph of ``key`` exists (on some call path, for some input set).
            graphs: Graphs the runner holds now.
            replays: Replays the runner has made so far (new keys with a replay between them
                are not churn).
            make_room: Called only at the capture limit: frees graphs that can never replay again
                and returns how many graphs are left.
            device_warmup: The device's default warm-up runs (when the options give none).
            name: The runner's name, for messages.
        """
        if replays != self._replays:
            self._replays = replays
            self._misses.clear()
            self._unreplayed = 0
        if not known:
            seen = self._warm.get(key, 0)
            runs = self._options.warmup_runs
            if seen < (device_warmup() if runs is None else runs):
                self._warm[key] = seen + 1
                return _WARMUP
            # A forced recapture misses on every call by design: that is no churn.
            if not self._options.force_recapture and self._churning(args, layout):
                return self._give_up_churn(layout, name)
            if self._unreplayed >= UNREPLAYED_LIMIT and not self._options.force_recapture:
                return self._no_replay(name)
        limit = self._options.capture_limit
        if graphs >= limit and make_room() >= limit:
            return Decision(
                Action.GIVE_UP,
                Reason.CAPTURE_LIMIT,
                f"GraphRunner {name!r} reached its capture limit of {limit} graphs; its "
                "graphs are freed and it runs eagerly from now on. Pad inputs to a few shapes "
                "(bucketing), or raise the limit: CaptureOptions(capture_limit=...), which "
                "TorchAir-style configs spell debug.aclgraph.static_capture_size_limit.",
                CaptureLimitWarning,
            )
        if not known:
            self._unreplayed += 1
        return _CAPTURE

    def _no_replay(self, name: str) -> Decision:
        told, self._told = self._told, True
        if told:
            return Decision(Action.EAGER, Reason.NO_REPLAY)
        return Decision(
            Action.EAGER,
            Reason.NO_REPLAY,
            f"GraphRunner {name!r} captured {UNREPLAYED_LIMIT} graphs of new input shapes in a "
            "row and replayed none: each call brings a shape not seen before, and a capture "
            "costs more than the call it would save. New shapes run eagerly until a captured "
            "one replays. Keep shapes static: a static KV cache (transformers' StaticCache, "
            "generate(cache_implementation='static')), or padding to a few sizes (npu_compile's "
            "capture sizes).",
        )

    def on_failure(
        self, key: Hashable, exc: Exception, name: str, device_warmup: int = 0
    ) -> Decision:
        """Decide for a capture of ``key`` that raised ``exc``.

        Args:
            key: The graph key whose capture failed.
            exc: What the capture raised.
            name: The runner's name, for messages.
            device_warmup: The eager calls the device needs before a capture (its default).
        """
        message = (
            f"GraphRunner {name!r} could not capture the graph for key {key!r}: "
            f"{type(exc).__name__}: {exc}"
        )
        runs = self._options.warmup_runs
        if runs is not None and runs < device_warmup:
            # Seen on CUDA: cuBLAS created its handle inside the first capture, which CUDA
            # refuses (CUBLAS_STATUS_NOT_INITIALIZED); the message alone does not say why.
            message += (
                f" (warmup_runs={runs} is below this device's need of {device_warmup}: its "
                "libraries, such as cuBLAS, initialise on their first call, which a capture "
                "refuses; leave warmup_runs at None)"
            )
        if self._options.strict:
            return Decision(
                Action.RAISE,
                Reason.CAPTURE_FAILED,
                message + ". Remove what cannot be captured (host syncs such as .item(), "
                "data-dependent shapes, CPU work) or drop strict=True to run such keys eagerly.",
            )
        self.failed.add(key)
        return Decision(Action.EAGER, Reason.CAPTURE_FAILED, message)

    def _churning(self, args: tuple[Any, ...], layout: Layout) -> bool:
        """Whether the last new keys differed only in a non-tensor value that keeps changing."""
        tensors = tuple((args[i].shape, args[i].dtype) for i in layout.user + layout.mutated)
        values = tuple(args[i] for i in layout.scalars)
        if self._misses and self._misses[-1][0] != tensors:
            self._misses.clear()
        self._misses.append((tensors, values))
        return len(self._misses) > CHURN_LIMIT

    def _give_up_churn(self, layout: Layout, name: str) -> Decision:
        varying = [
            i
            for n, i in enumerate(layout.scalars)
            if len({repr(values[n]) for _, values in self._misses}) > 1
        ]
        self._misses.clear()
        return Decision(
            Action.GIVE_UP,
            Reason.CHURN,
            f"GraphRunner {name!r} captured {CHURN_LIMIT} graphs in a row that differ only "
            f"in the value of argument(s) {varying} (ints that change on every call) and never "
            "replayed one; it runs eagerly from now on. Pass such a value as a tensor, keep it "
            "out of the compiled region, or let it decide nothing but arithmetic (npu_compile "
            "then passes it to the graph as a device scalar).",
            CaptureChurnWarning,
        )
