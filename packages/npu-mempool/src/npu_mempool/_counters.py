"""Counters of captures, replays, recaptures, fallbacks and pool memory."""

from __future__ import annotations

import contextlib
import enum
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from npu_mempool._counting import expect_moves

__all__ = ["NEW_KEY", "Counters", "RecaptureReason", "counters"]


class RecaptureReason(enum.StrEnum):
    """Why a graph key was captured again (keys of ``Counters.recapture_reasons``).

    Members are strings, so ``counters.recapture_reasons["parameter_moved"]`` keeps working.

    Attributes:
        PARAMETER_MOVED: A PARAMETER input came at a new address (another module instance).
        MUTATED_INPUT_MOVED: A MUTATED input came at a new address (another KV cache).
        OUTPUTS_IN_USE: The key's graph (or another graph of its pool) had outputs still in use,
            so the call took a new call path.
        FORCED: ``CaptureOptions.force_recapture`` asked for a new capture on every call.
    """

    PARAMETER_MOVED = "parameter_moved"
    MUTATED_INPUT_MOVED = "mutated_input_moved"
    OUTPUTS_IN_USE = "outputs_in_use"
    FORCED = "forced"


#: The reason of a capture after the first that is no recapture: a graph key not seen before
#: (another shape, dtype, stride, int value or autocast state). A key of ``capture_reasons``.
NEW_KEY = "new_key"


_FIELDS = (
    "calls",
    "captures",
    "replays",
    "recaptures",
    "fallbacks",
    "eager_calls",
    "pool_bytes",
)
_COUNTED = ("captures", "replays", "fallbacks", "eager_calls")


class Counters:
    """What a runner (or the whole process) has done so far.

    Attributes:
        captures: Graphs captured, recaptures included.
        replays: Calls answered by a graph replay.
        recapture_reasons: Recaptures per reason: ``"mutated_input_moved"`` (a MUTATED input came
            at a new address) or ``"parameter_moved"`` (a PARAMETER did).
        capture_reasons: Why each capture after the first was made: ``"new_key"`` (a graph key
            not seen before: another shape, dtype, stride, int value) or a recapture reason.
            They add up to ``captures - 1``: a runner whose captures keep rising against its
            replays spends capture time it never gets back.
        fallbacks: Times a runner gave up on graphs (capture limit or a failed capture).
        eager_calls: Calls run eagerly (warm-up calls, calls after a fallback, new shapes that
            never repeat, calls over the device's graph budget).
    """

    __slots__ = (
        "_pool_bytes",
        "capture_reasons",
        "captures",
        "eager_calls",
        "fallbacks",
        "recapture_reasons",
        "replays",
    )

    def __init__(self, pool_bytes: Callable[[], int] | None = None) -> None:
        self.captures = 0
        self.replays = 0
        self.recapture_reasons: Counter[str] = Counter()  # RecaptureReason -> count
        self.capture_reasons: Counter[str] = Counter()  # NEW_KEY or a RecaptureReason -> count
        self.fallbacks = 0
        self.eager_calls = 0
        self._pool_bytes = pool_bytes

    @property
    def calls(self) -> int:
        """Calls answered: by a replay, by a capture (its call's results) or eagerly."""
        return self.captures + self.replays + self.eager_calls

    @property
    def recaptures(self) -> int:
        """Recaptures for any reason."""
        return sum(self.recapture_reasons.values())

    @property
    def pool_bytes(self) -> int:
        """Bytes held by graph pools: arena high-water mark on CPU, pool segments on devices."""
        return self._pool_bytes() if self._pool_bytes is not None else 0

    def snapshot(self) -> dict[str, Any]:
        """Return the current values as a plain dict (``recapture_reasons`` copied)."""
        values: dict[str, Any] = {name: getattr(self, name) for name in _FIELDS}
        values["recapture_reasons"] = {str(k): v for k, v in self.recapture_reasons.items()}
        values["capture_reasons"] = {str(k): v for k, v in self.capture_reasons.items()}
        return values

    def expect(self, **deltas: int | Mapping[str, int]) -> contextlib.AbstractContextManager[None]:
        """Assert how much each counter moves inside the ``with`` block.

        Args:
            **deltas: Expected change per counter, e.g. ``captures=1, replays=2``.
                ``recapture_reasons={"mutated_input_moved": 1}`` checks reasons; counters not named
                are not checked.

        Raises:
            AssertionError: A counter moved by another amount (all mismatches are listed).
            TypeError: A name that is not a counter.

        Example:
            >>> import torch
            >>> from npu_mempool import GraphRunner
            >>> runner = GraphRunner(torch.sin)
            >>> x = torch.zeros(4)
            >>> with runner.counters.expect(captures=1, replays=2):
            ...     for _ in range(3):  # one capture, then replays
            ...         total = runner(x).sum()
            >>> with runner.counters.expect(captures=1):
            ...     total = runner(x).sum()
            Traceback (most recent call last):
            AssertionError: counters: captures moved by 0, expected 1
        """
        return expect_moves(self.snapshot, deltas, "counters")

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.snapshot().items())
        return f"Counters({inner})"


def _all_pool_bytes() -> int:
    from npu_mempool._pool import live_pool_bytes

    return live_pool_bytes()


# Process-wide totals are derived, never counted on the per-call path: each runner counts into
# its own Counters (under its own lock); the totals add those of live runners to what runners
# that are gone had counted.
_registry_lock = threading.Lock()
_live: dict[int, Counters] = {}
_retired = Counters()


def register(counters: Counters, owner: object) -> None:
    """Count ``counters`` in the process-wide totals, for good once ``owner`` is gone."""
    with _registry_lock:
        _live[id(counters)] = counters
    weakref.finalize(owner, _retire, counters)


def _retire(counters: Counters) -> None:
    with _registry_lock:
        if _live.pop(id(counters), None) is None:
            return
        for name in _COUNTED:
            setattr(_retired, name, getattr(_retired, name) + getattr(counters, name))
        _retired.recapture_reasons.update(counters.recapture_reasons)
        _retired.capture_reasons.update(counters.capture_reasons)


def _total(name: str) -> Any:
    with _registry_lock:
        parts = [_retired, *_live.values()]
    if name in ("recapture_reasons", "capture_reasons"):
        total: Counter[str] = Counter()
        for part in parts:
            total.update(getattr(part, name))
        return total
    return sum(getattr(part, name) for part in parts)


class _ProcessCounters(Counters):
    """The sum over every runner, live or gone; ``pool_bytes`` sums every live pool."""

    __slots__ = ()

    def __init__(self) -> None:
        self._pool_bytes = _all_pool_bytes

    captures = property(lambda self: _total("captures"))
    replays = property(lambda self: _total("replays"))
    fallbacks = property(lambda self: _total("fallbacks"))
    eager_calls = property(lambda self: _total("eager_calls"))
    recapture_reasons = property(lambda self: _total("recapture_reasons"))
    capture_reasons = property(lambda self: _total("capture_reasons"))


#: Process-wide counters: the sum over every runner; ``pool_bytes`` sums every live pool.
counters: Counters = _ProcessCounters()
