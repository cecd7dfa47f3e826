"""The device-wide budget of captured graphs: how many one device type may hold at once.

A runner limits its own graphs (``CaptureOptions.capture_limit``), but a device limits them all:
on Ascend every ACL graph takes at least one of the device's streams (about 2048), which side
streams and collective communication need too. vllm-ascend caps its captures at 1800 for that
reason, and a 60-layer model split at attention with 32 capture sizes would need about 1950.
So graphs are counted per device type, across runners and pools (each pool's keep-alive graph
too), and a capture that would go over the budget runs eagerly instead, with one log line.

The budget is read and changed only on the capture path (a capture, a freed graph), never on a
replay.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from npu_mempool._trace import log
from npu_mempool.errors import ConfigError

__all__ = ["GraphBudget", "graph_budget"]

#: The default budget per device type (``None``: no limit). On NPU, vllm-ascend's cap: it leaves
#: about 250 of torch_npu's ~2048 streams to side streams and communication.
DEFAULT_BUDGETS: dict[str, int | None] = {"npu": 1800}


class GraphBudget:
    """The graphs of one device type held at once, and how many may be.

    Get one with :func:`graph_budget`. Set :attr:`limit` to change the budget (``None``: none).

    Attributes:
        device_type: ``"npu"``, ``"cuda"``, ``"cpu"``, ...
    """

    def __init__(self, device_type: str, limit: int | None) -> None:
        self.device_type = device_type
        self._limit = limit
        self._live = 0
        self._lock = threading.Lock()
        self._warned = False

    @property
    def limit(self) -> int | None:
        """The most graphs the device type may hold at once (``None``: no limit)."""
        return self._limit

    @limit.setter
    def limit(self, value: int | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"a graph budget is a count or None, got {value!r}")
        if value is not None and value < 1:
            raise ConfigError(f"a graph budget must be at least 1, got {value}")
        with self._lock:
            self._limit = value
            self._warned = False

    @property
    def live(self) -> int:
        """Graphs of this device type held now, over every runner and pool."""
        return self._live

    def admits(self, count: int, name: str) -> bool:
        """Whether ``count`` more graphs fit; logs once when the first does not.

        Args:
            count: The graphs the capture would add (its own, and a new pool's keep-alive one).
            name: The runner asking, for the log line.
        """
        limit = self._limit
        if limit is None or self._live + count <= limit:
            return True
        with self._lock:
            warned, self._warned = self._warned, True
        if not warned:
            log.warning(
                "GraphRunner %r: the %s device already holds %d graph(s), its budget of %d "
                "across runners (each takes a device stream); this and every further capture "
                "over it run eagerly. Capture fewer sizes or pieces, or raise "
                "npu_mempool.graph_budget(%r).limit",
                name,
                self.device_type,
                self._live,
                limit,
                self.device_type,
            )
        return False

    def hold(self, owner: object) -> Callable[[], None]:
        """Count one graph for as long as ``owner`` lives; returns what gives it back early.

        The returned function gives the graph back once (a freed graph); otherwise it goes back
        when ``owner`` is collected.
        """
        with self._lock:
            self._live += 1
        return weakref.finalize(owner, self._give_back)

    def _give_back(self) -> None:
        with self._lock:
            self._live -= 1


_budgets: dict[str, GraphBudget] = {}
_budgets_lock = threading.Lock()


def graph_budget(device_type: str) -> GraphBudget:
    """The device-wide budget of captured graphs for ``device_type``.

    Every runner's graphs count, and each graph pool's keep-alive graph on a device. A capture
    that would go over the budget runs eagerly (logged once). By default NPU allows 1800 graphs
    (vllm-ascend's cap, leaving torch_npu's other streams to side streams and communication);
    other device types have no budget.

    Args:
        device_type: ``"npu"``, ``"cuda"``, ``"cpu"``, ...

    Returns:
        The budget; set its ``limit`` to change it.

    Example:
        >>> import npu_mempool
        >>> budget = npu_mempool.graph_budget("npu")
        >>> budget.limit
        1800
        >>> npu_mempool.graph_budget("cuda").limit is None
        True
    """
    budget = _budgets.get(device_type)
    if budget is None:
        with _budgets_lock:
            budget = _budgets.setdefault(
                device_type, GraphBudget(device_type, DEFAULT_BUDGETS.get(device_type))
            )
    return budget
