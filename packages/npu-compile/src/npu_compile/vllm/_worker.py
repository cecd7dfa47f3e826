"""Per-worker statistics, reachable from the engine with ``llm.collective_rpc``."""

from __future__ import annotations

from typing import Any

import npu_mempool

__all__ = ["NpuCompileWorkerExtension", "worker_stats"]


def worker_stats() -> dict[str, Any]:
    """What npu-compile did in this process (a vLLM worker, or any other).

    Returns:
        A plain dict: the backend counts of :func:`npu_compile.backend.process_stats`
        (``fx_graphs``, ``captured``, ``eager``, ``fallbacks``, ``loaded``) and the graph counts
        of :data:`npu_mempool.counters` (``captures``, ``replays``, ``recaptures``,
        ``eager_calls``, ``pool_bytes``; the runners' own give-ups as ``graph_fallbacks``), and
        ``nodes_checked``: how many nodes of a multi-node server were found to agree on
        npu-compile's setup when the worker started (0 on one node).
    """
    from npu_compile.backend import process_stats
    from npu_compile.vllm._nodes import nodes_checked

    stats: dict[str, Any] = dict(process_stats())
    graphs = npu_mempool.counters.snapshot()
    stats.update(
        captures=graphs["captures"],
        replays=graphs["replays"],
        recaptures=graphs["recaptures"],
        graph_fallbacks=graphs["fallbacks"],
        eager_calls=graphs["eager_calls"],
        pool_bytes=graphs["pool_bytes"],
        nodes_checked=nodes_checked(),
    )
    return stats


class NpuCompileWorkerExtension:
    """Mixed into vLLM's worker class by ``worker_extension_cls``.

    Example::

        llm = LLM(model, compilation_config={"mode": 2, "backend": "npu_compile"},
                  worker_extension_cls="npu_compile.vllm.NpuCompileWorkerExtension")
        llm.generate(prompts)
        per_rank = llm.collective_rpc("npu_compile_stats")  # one dict per worker
    """

    def npu_compile_stats(self) -> dict[str, Any]:
        """:func:`worker_stats` of this worker's process."""
        return worker_stats()
