"""Every node of a multi-node vLLM server starts with the same npu-compile setup, or none starts.

vLLM builds each node's configuration from that node's own arguments, environment and
installation: node 0 from ``LLM(...)`` or ``vllm serve``, the others from ``vllm serve --headless``.
Nothing compares them. Nodes that differ fail late and unclearly (a worker aborts in a collective of
another size when the nodes' scheduler limits differ: ``LLM`` and ``vllm serve`` have different
defaults), or not at all (one node captures graphs, the other runs Inductor's code; a node without
a configured backend's module fails alone while the others wait in a collective).

So each worker, once its ``torch.distributed`` groups exist and before its model loads, writes a few
settings to the default group's store and reads every other rank's (a few hundred bytes per rank).
Where the nodes differ, every worker stops with one line that names the nodes and what differs. The
check runs only when the workers span more than one node; ``NPU_COMPILE_VLLM_NODE_CHECK=0`` turns it
off.

vLLM has no hook between a worker's distributed start and its model load, so the entry point of
vLLM's general plugins (loaded in every vLLM process) wraps ``WorkerWrapperBase.init_device``, which
every executor (``mp``, Ray) calls in each worker process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import socket
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from npu_compile._version import __version__
from npu_compile.errors import ConfigError
from npu_compile.vllm._plugin import enabled

__all__ = [
    "CHECK_VARIABLE",
    "check_nodes",
    "disagreement",
    "exchange",
    "local_report",
    "nodes_checked",
    "register",
    "verdict",
]

logger = logging.getLogger("npu_compile")

#: ``NPU_COMPILE_VLLM_NODE_CHECK=0`` starts the nodes without comparing them.
CHECK_VARIABLE = "NPU_COMPILE_VLLM_NODE_CHECK"
#: How long a worker waits for the other ranks' settings. The ranks meet at vLLM's group creation
#: just before, so the wait is milliseconds unless a node runs without this check.
WAIT_SECONDS = 60.0
_STORE_PREFIX = "npu_compile/vllm_nodes/"
_WRAPPED = "_npu_compile_checks_nodes"
_ADVICE = (
    "start every node with the same npu-compile, torch and vLLM, the same engine arguments and "
    f"NPU_COMPILE_VLLM_PLATFORM, and a configured backend's module on each ({CHECK_VARIABLE}=0 "
    "starts without this check)"
)

_checked = 0


def nodes_checked() -> int:
    """How many nodes this process found in agreement at its start (0: no check ran)."""
    return _checked


def register() -> None:
    """The entry point of vLLM's general plugins: compare the nodes in each worker as it starts.

    vLLM loads general plugins in every process it starts. A worker process has imported vLLM's
    worker wrapper by then; any other process (the engine, the API server, a model inspection)
    is left alone, which also spares it the import (about a second).
    """
    module = sys.modules.get("vllm.v1.worker.worker_base")
    wrapper: Any = getattr(module, "WorkerWrapperBase", None)
    original: Any = getattr(wrapper, "init_device", None)
    if original is None or getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def init_device(self: Any) -> None:
        original(self)
        config = getattr(self, "vllm_config", None)
        if config is not None:  # set by init_worker; a wrapper used otherwise is not checked
            check_nodes(config)

    setattr(init_device, _WRAPPED, True)
    wrapper.init_device = init_device


def _module_state(backend: str) -> tuple[str, str] | None:
    """``(module, state)`` of a backend given by qualified name; ``None`` for a registered name."""
    if "." not in backend:
        return None
    module = backend.rsplit(".", 1)[0]
    try:
        spec = importlib.util.find_spec(module)
    except Exception as error:  # a parent package that fails to import
        return module, f"not importable ({type(error).__name__})"
    if spec is None:
        return module, "missing"
    origin = spec.origin
    if origin is None or not os.path.isfile(origin):
        return module, "found"
    with open(origin, "rb") as source:
        digest = hashlib.sha256(source.read()).hexdigest()[:12]
    return module, f"found (sha256 {digest})"


def local_report(vllm_config: Any) -> dict[str, Any]:
    """What this worker tells the others: its node, its settings, whether it uses npu-compile.

    Args:
        vllm_config: The worker's ``VllmConfig``.

    Returns:
        ``{"node": name, "settings": {name: value}, "uses": bool}``, every value a string.
    """
    import torch

    try:
        import vllm

        vllm_version = str(vllm.__version__)
    except ImportError:
        vllm_version = "absent"
    compilation = vllm_config.compilation_config
    model = vllm_config.model_config
    scheduler = vllm_config.scheduler_config
    parallel = vllm_config.parallel_config
    backend = str(compilation.backend or "")
    platform = enabled()
    settings = {
        "npu-compile": __version__,
        "torch": str(torch.__version__),
        "vLLM": vllm_version,
        "NPU_COMPILE_VLLM_PLATFORM": "set" if platform else "unset",
        "compilation mode": str(getattr(compilation.mode, "value", compilation.mode)),
        "compile backend": backend or "(none)",
        # npu-compile captures one graph per token count, and these decide the counts: nodes that
        # differ run collectives of different sizes (LLM and `vllm serve` default differently).
        "dtype": str(model.dtype).removeprefix("torch."),
        "max_model_len": str(model.max_model_len),
        "max_num_batched_tokens": str(scheduler.max_num_batched_tokens),
        "max_num_seqs": str(scheduler.max_num_seqs),
    }
    module = _module_state(backend)
    if module is not None:
        settings[f"backend module {module[0]}"] = module[1]
    nnodes = int(getattr(parallel, "nnodes", 1))
    node = f"node {parallel.node_rank}" if nnodes > 1 else f"host {socket.gethostname()}"
    # A backend by qualified name may be npu-compile's (configured options): counted as in use.
    uses = platform or backend == "npu_compile" or module is not None
    return {"node": node, "settings": settings, "uses": uses}


def exchange(
    store: Any, rank: int, world_size: int, report: Mapping[str, Any], timeout: float
) -> tuple[dict[int, dict[str, Any]], list[int]]:
    """Write this rank's report to ``store`` and read every rank's.

    Args:
        store: A ``torch.distributed.Store`` every rank reaches.
        rank: This rank.
        world_size: How many ranks report.
        report: This rank's :func:`local_report`.
        timeout: Seconds to wait for the other ranks.

    Returns:
        The reports by rank, and the ranks that sent none within ``timeout``.
    """
    import torch.distributed as dist

    store.set(f"report/{rank}", json.dumps(report))
    keys = [f"report/{r}" for r in range(world_size)]
    # A rank that does not report in time is named below, not raised here.
    with contextlib.suppress(dist.DistStoreError):
        store.wait(keys, timedelta(seconds=timeout))
    reports: dict[int, dict[str, Any]] = {}
    missing: list[int] = []
    for r, key in enumerate(keys):
        if store.check([key]):
            reports[r] = json.loads(store.get(key))
        else:
            missing.append(r)
    # Rank 0's process holds a TCP store: it must not fail and take the store away before every
    # rank has read, or the others would see a broken connection instead of the differences.
    store.set(f"read/{rank}", "1")
    with contextlib.suppress(dist.DistStoreError):
        store.wait([f"read/{r}" for r in reports], timedelta(seconds=timeout))
    return reports, missing


def _names(labels: list[str]) -> str:
    return " and ".join(labels)


def disagreement(reports: Mapping[int, Mapping[str, Any]]) -> str | None:
    """What differs between the nodes, on one line, or ``None`` when they agree.

    Args:
        reports: Each rank's :func:`local_report`.

    Returns:
        For each setting with more than one value, every value and the nodes that have it, in the
        order of the nodes' first ranks.
    """
    nodes: dict[str, Mapping[str, str]] = {}
    for rank in sorted(reports):
        report = reports[rank]
        label = str(report["node"])
        settings: Mapping[str, str] = report["settings"]
        if label in nodes and nodes[label] != settings:
            # Two ranks of one node differ (a node name two hosts share): tell them apart.
            label = f"{label} (rank {rank})"
        nodes.setdefault(label, settings)
    keys: list[str] = []
    for settings in nodes.values():
        keys += [key for key in settings if key not in keys]
    differences = []
    for key in keys:
        by_value: dict[str, list[str]] = {}
        for label, settings in nodes.items():
            by_value.setdefault(settings.get(key, "absent"), []).append(label)
        if len(by_value) > 1:
            values = ", ".join(f"{value} on {_names(labels)}" for value, labels in by_value.items())
            differences.append(f"{key} {values}")
    return "; ".join(differences) or None


def _node_count(vllm_config: Any) -> int:
    try:
        from vllm.distributed.parallel_state import get_node_count

        return int(get_node_count())
    except Exception:  # an older or newer vLLM: its configuration says
        return int(getattr(getattr(vllm_config, "parallel_config", None), "nnodes", 1))


def _missing_names(missing: list[int], world_size: int, nnodes: int) -> str:
    per_node = world_size // nnodes if nnodes > 1 and world_size % nnodes == 0 else 0
    names = [f"rank {r} (node {r // per_node})" if per_node else f"rank {r}" for r in missing]
    return ", ".join(names)


def verdict(
    reports: Mapping[int, Mapping[str, Any]],
    missing: list[int],
    *,
    world_size: int,
    nnodes: int,
    timeout: float,
) -> tuple[str | None, str | None]:
    """What the exchanged reports mean: ``(error, warning)``, each one line or ``None``.

    Nodes that differ, or ranks that sent nothing, are an error where any node uses npu-compile
    (it is then npu-compile's setup that differs), and only a warning elsewhere: installing
    npu-compile must not stop a server that does not use it.

    Args:
        reports: Each reporting rank's :func:`local_report`.
        missing: The ranks that sent none.
        world_size: How many ranks there are.
        nnodes: How many nodes they run on.
        timeout: How long the ranks waited, for the message.

    Returns:
        The line to raise, or the line to log, or neither where the nodes agree.
    """
    uses = any(bool(report["uses"]) for report in reports.values())
    problems = []
    difference = disagreement(reports)
    if difference is not None:
        problems.append(f"vLLM's nodes disagree: {difference}")
    if missing:
        problems.append(
            f"{_missing_names(missing, world_size, nnodes)} sent no settings within {timeout:g} s "
            "(npu-compile is not installed there, is older than this check, or VLLM_PLUGINS "
            "leaves out its plugin 'npu_compile')"
        )
    if not problems:
        return None, None
    message = f"npu-compile: {'; '.join(problems)}"
    if uses:
        return f"{message}; {_ADVICE}", None
    return None, f"{message}; not checked further, as no node uses npu-compile"


def check_nodes(vllm_config: Any, *, timeout: float = WAIT_SECONDS) -> None:
    """Compare this worker's settings with every other rank's; raise where the nodes differ.

    Does nothing on one node, outside ``torch.distributed``, or under
    ``NPU_COMPILE_VLLM_NODE_CHECK=0``.

    Args:
        vllm_config: The worker's ``VllmConfig``.
        timeout: Seconds to wait for the other ranks' settings.

    Raises:
        ConfigError: The nodes' settings differ, or a node sent none, and a node uses npu-compile.
    """
    global _checked
    if os.environ.get(CHECK_VARIABLE, "1").strip().lower() in ("0", "false", "no", "off"):
        return
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return
    nnodes = _node_count(vllm_config)
    if nnodes < 2:
        return
    from torch.distributed import distributed_c10d

    world_size = dist.get_world_size()
    try:
        report = local_report(vllm_config)
        store = distributed_c10d.PrefixStore(_STORE_PREFIX, distributed_c10d._get_default_store())
        reports, missing = exchange(store, dist.get_rank(), world_size, report, timeout)
    except Exception as failure:  # the check must never be what stops a start that would work
        logger.warning(
            "npu-compile: the vLLM nodes' settings were not compared (%s: %s)",
            type(failure).__name__,
            failure,
        )
        return
    error, warning = verdict(
        reports, missing, world_size=world_size, nnodes=nnodes, timeout=timeout
    )
    if error is not None:
        raise ConfigError(error)
    if warning is not None:
        logger.warning("%s", warning)
        return
    _checked = len({str(r["node"]) for r in reports.values()})
