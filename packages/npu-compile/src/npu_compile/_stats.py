"""What a backend did: FX graphs compiled, captured, run eagerly or fallen back, and why.

The pipeline records into a :class:`BackendStats` through its ``record_*`` methods; users and
tests read its fields, ``snapshot()`` and ``expect()``. Graphs rebuilt from a saved artifact
(torch's AOT compile, vLLM's compile cache) have no backend object in the loading process and
count in :data:`loaded_stats`.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from npu_compile._counting import expect_moves
from npu_compile.errors import FallbackReason

if TYPE_CHECKING:
    from npu_mempool import GraphRunner

__all__ = ["BackendStats", "Fallback", "loaded_stats"]


class Fallback(NamedTuple):
    """One entry of ``BackendStats.fallbacks``: a plain ``(graph, message)`` pair.

    Its :class:`FallbackReason` is ``stats.fallback_reasons[entry.graph]``.

    Attributes:
        graph: The FX graph's name (as in the log lines, e.g. ``npu_compile_3``).
        message: Why it runs eagerly and what to do about it, for people.
    """

    graph: str
    message: str


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

    def record_runner(self, runner: GraphRunner) -> None:
        """Keep a (weak) reference to a runner made for one of this backend's graphs."""
        self._runner_refs.append(weakref.ref(runner))

    def record_fallback(self, graph: str, reason: FallbackReason, message: str) -> None:
        """Record that ``graph`` runs eagerly (or without static kernels), and why."""
        self.fallbacks.append(Fallback(graph, message))
        self.fallback_reasons[graph] = reason

    def record_split(self, graph: str, pieces: int, splits: tuple[str, ...]) -> None:
        """Record that ``graph`` was captured in ``pieces`` pieces around ``splits``."""
        self.piecewise += 1
        self.pieces += pieces
        self.splits[graph] = splits

    def calls(self) -> dict[str, Any]:
        """How the calls of this backend's graphs were answered, over every live runner.

        ``calls``, ``captures``, ``replays`` and ``eager_calls`` summed over the runners (pieces
        and backward graphs included); ``capture_reasons``: why each capture after a runner's
        first was made (``new_key``, ``parameter_moved``, ...), summed; ``runners``: the same
        per runner, by name. A graph captured and never replayed saves nothing: a steady-state
        loop should show replays rising and captures not.
        """
        totals: dict[str, Any] = {"calls": 0, "captures": 0, "replays": 0, "eager_calls": 0}
        reasons: dict[str, int] = {}
        per_runner: dict[str, dict[str, Any]] = {}
        for runner in self.runners:
            counters = runner.counters
            captured_why = {str(k): v for k, v in counters.capture_reasons.items()}
            row: dict[str, Any] = {
                "calls": counters.calls,
                "captures": counters.captures,
                "replays": counters.replays,
                "eager_calls": counters.eager_calls,
                "capture_reasons": captured_why,
            }
            for name in totals:
                totals[name] += row[name]
            for reason, count in captured_why.items():
                reasons[reason] = reasons.get(reason, 0) + count
            per_runner[runner.name] = row
        return {**totals, "capture_reasons": reasons, "runners": per_runner}

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

    def expect(self, **deltas: int) -> contextlib.AbstractContextManager[None]:
        """Assert how much each named count moves inside the ``with`` block.

        Raises:
            AssertionError: A count moved by another amount (all mismatches are listed).
            TypeError: A name that is not a count.
        """
        return expect_moves(self.snapshot, deltas, "backend stats")


#: What graphs loaded from a compile cache did: no backend object compiled them in this process.
loaded_stats = BackendStats()
