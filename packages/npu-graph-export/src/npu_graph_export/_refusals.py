"""Everything a graph's conversion could not do, gathered into one refusal.

A model that needs three missing converters should learn of all three at once, with how often
each op occurs and where it first occurs in the user's code, not one per attempt.
"""

from __future__ import annotations

from dataclasses import dataclass

from npu_graph_export.errors import UnsupportedOpError


class _Failed:
    """The converted value of a node that could not be converted (nodes reading it are skipped)."""

    def __repr__(self) -> str:
        return "FAILED"


FAILED = _Failed()


@dataclass
class _Refusal:
    count: int
    where: str
    reason: str | None


class Refusals:
    """The ops a conversion refused, by op name, in the order they first occur."""

    def __init__(self) -> None:
        self._by_op: dict[str, _Refusal] = {}

    def __bool__(self) -> bool:
        return bool(self._by_op)

    def add(self, op: str, where: str, reason: str | None = None) -> None:
        """Count one node of ``op`` that cannot be exported (``reason``: None = no converter)."""
        known = self._by_op.get(op)
        if known is None:
            self._by_op[op] = _Refusal(1, where, _one_line(reason))
        else:
            known.count += 1
            if known.reason is None and reason is not None:
                known.reason = _one_line(reason)

    def error(self) -> UnsupportedOpError:
        """One :class:`UnsupportedOpError` naming every refused op, its count and first place."""
        parts = []
        for op, refusal in self._by_op.items():
            what = "no GE converter" if refusal.reason is None else refusal.reason
            parts.append(f"{op} x{refusal.count}, first at {refusal.where}: {what}")
        kinds = len(self._by_op)
        nodes = sum(r.count for r in self._by_op.values())
        head = (
            f"{kinds} ATen op cannot be exported ({nodes} node{'s' if nodes > 1 else ''})"
            if kinds == 1
            else f"{kinds} ATen ops cannot be exported ({nodes} nodes)"
        )
        message = (
            f"{head}: {'; '.join(parts)}. Rewrite those parts with supported ops, or register "
            "a converter; npu_graph_export.supported_ops() lists the ops that convert"
        )
        first_op, first = next(iter(self._by_op.items()))
        return UnsupportedOpError(
            message,
            op=first_op,
            module_path=first.where,
            ops={op: r.count for op, r in self._by_op.items()},
            locations={op: r.where for op, r in self._by_op.items()},
        )


def _one_line(text: str | None) -> str | None:
    # "; " separates the ops of the message: a reason keeps its own clauses apart with commas.
    return None if text is None else " ".join(text.split()).replace("; ", ", ")
