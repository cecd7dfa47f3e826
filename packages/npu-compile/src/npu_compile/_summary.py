"""``debug.fx_summary``: the operator statistics of an FX graph, as a CSV file."""

from __future__ import annotations

import csv
import logging
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from npu_compile._settings import Dump

__all__ = ["write_fx_summary"]

logger = logging.getLogger("npu_compile")


def _describe(value: Any) -> str:
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    return type(value).__name__ if value is not None else "None"


def write_fx_summary(gm: torch.fx.GraphModule, dump: Dump | None, name: str) -> Path | None:
    """Write the summary of ``gm`` where ``dump`` (``debug.fx_summary``) says.

    Returns:
        The file written, or ``None`` when the option is off.
    """
    if dump is None:
        return None
    target = dump.path_for(name)
    counts: Counter[str] = Counter()
    first: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        op = str(node.target)
        counts[op] += 1
        first.setdefault(op, "; ".join(_describe(a) for a in node.args))
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["op", "count", "inputs of the first use"])
            for op, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
                writer.writerow([op, count, first[op]])
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    logger.info("FX graph %s: operator summary written to %s", name, path)
    return path
