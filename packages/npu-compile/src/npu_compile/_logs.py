"""npu_compile's logs and trace artifacts, registered with ``torch._logging``.

``TORCH_LOGS="+npu_compile"`` shows every decision of the stack at DEBUG (the ``npu_compile``,
``npu_mempool``, ``npu_streams`` and ``npu_static_kernel`` loggers), the graphs handed to the
runner after the passes included; ``TORCH_LOGS="npu_compile"`` one INFO line per compiled graph
and per capture. Under ``TORCH_TRACE`` (tlparse) the graphs (``npu_compile_graph_<name>``) and a
record per capture (``npu_mempool_capture``) are structured artifacts, and under
``TORCH_COMPILE_DEBUG=1`` the graphs are also written to ``<debug dir>/npu_compile/<name>.py``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from torch._logging._internal import trace_structured

__all__ = ["LOGGERS", "dump_graph", "register"]

LOGGERS = ("npu_compile", "npu_mempool", "npu_streams", "npu_static_kernel")

logger = logging.getLogger("npu_compile")
_registered = False


def register() -> None:
    """Make the loggers known to ``torch._logging`` under one name (once).

    torch reads ``TORCH_LOGS`` when it is imported, before these names exist; where the variable
    names one of them, its settings are applied again now.
    """
    global _registered
    if _registered:
        return
    _registered = True
    from torch._logging import _internal

    _internal.register_log("npu_compile", list(LOGGERS))
    settings = os.environ.get("TORCH_LOGS", "")
    if "npu_compile" in settings:
        _internal._parse_log_settings.cache_clear()
        _internal._init_logs()


def dump_graph(name: str, gm: torch.fx.GraphModule) -> None:
    """Report the graph a runner captures, wherever the user asked to see it."""
    register()
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("FX graph %s as captured:\n%s", name, gm.print_readable(print_output=False))
    trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": f"npu_compile_graph_{name}", "encoding": "string"},
        payload_fn=lambda: gm.print_readable(print_output=False),
    )
    if torch._dynamo.config.debug_dir_root and os.environ.get("TORCH_COMPILE_DEBUG") == "1":
        from torch._dynamo.utils import get_debug_dir

        folder = Path(get_debug_dir()) / "npu_compile"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.py").write_text(gm.print_readable(print_output=False))
