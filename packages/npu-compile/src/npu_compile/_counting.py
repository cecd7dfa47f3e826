"""``expect()`` for counters: check how much each named count moves inside a ``with`` block.

Every package with counters carries a copy of this module with the same code (the libraries never
import each other); the repository's consistency check fails when a copy drifts. Change the copy
in npu-compile and run ``python .ci/check_consistency.py --sync`` to update the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["expect_moves"]


@contextlib.contextmanager
def expect_moves(
    snapshot: Callable[[], Mapping[str, Any]], deltas: Mapping[str, object], what: str
) -> Iterator[None]:
    """Assert how much each count in ``deltas`` moves inside the ``with`` block.

    Args:
        snapshot: Returns the counts now, by name. A count that is a mapping (reasons by
            name) is checked per key: ``deltas`` then gives a mapping of expected moves.
        deltas: Expected change per count name; counts not named are not checked.
        what: What the counts are, to start the assertion message (``"counters"``).

    Raises:
        AssertionError: A count moved by another amount (all mismatches are listed).
        TypeError: A name that is not a count.
    """
    before = snapshot()
    unknown = sorted(set(deltas) - set(before))
    if unknown:
        raise TypeError(f"unknown counter(s) {unknown}; expected some of {list(before)}")
    yield
    after = snapshot()
    wrong: list[str] = []
    for name, expected in deltas.items():
        if isinstance(expected, Mapping):
            for key, count in expected.items():
                moved = after[name].get(key, 0) - before[name].get(key, 0)
                if moved != count:
                    wrong.append(f"{name}[{key!r}] moved by {moved}, expected {count}")
        else:
            moved = after[name] - before[name]
            if moved != expected:
                wrong.append(f"{name} moved by {moved}, expected {expected}")
    if wrong:
        raise AssertionError(f"{what}: " + "; ".join(wrong))
