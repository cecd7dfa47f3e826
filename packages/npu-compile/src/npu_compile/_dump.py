"""TorchAir's debug outputs per FX graph: ``debug.data_dump`` and ``debug.fx_summary``.

``debug.data_dump`` runs a graph eagerly and saves every operator's inputs and outputs as .npy.
As in TorchAir, a graph with a data dump is not captured: each call runs the AOT graph node by
node and writes, for every operator the filter keeps, ``<node>-<target>.INPUT.<i>.<time>.npy``
and ``<node>-<target>.OUTPUT.<i>.<time>.npy`` under
``<path>/worldsize<w>_global_rank<r>/<graph name>/<call number>/``. The filter is called with the
FX node and keeps it when it returns something truthy (TorchAir returns the node or ``None``).
"""

from __future__ import annotations

import csv
import itertools
import logging
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import torch.fx

from npu_compile._settings import DataDump, Dump

__all__ = ["data_dumper", "write_fx_summary"]

logger = logging.getLogger("npu_compile")


def _rank_folder() -> str:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return f"worldsize{dist.get_world_size()}_global_rank{dist.get_rank()}"
    return "worldsize1_global_rank0"


def _as_array(value: object) -> Any:
    import numpy as np

    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16
            tensor = tensor.float()
        return tensor.numpy()
    try:
        return np.array(value)
    except Exception:
        return np.array(str(value))


def _save(folder: str, stem: str, value: object) -> None:
    import numpy as np

    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".dump-", suffix=".npy")
    try:
        with os.fdopen(handle, "wb") as stream:
            np.save(stream, _as_array(value))
        os.replace(temporary, os.path.join(folder, stem + ".npy"))
    except BaseException:
        os.unlink(temporary)
        raise


class _Dumper(torch.fx.Interpreter):
    def __init__(
        self,
        gm: torch.fx.GraphModule,
        root: str,
        keep: Callable[[torch.fx.Node], object] | None,
    ) -> None:
        super().__init__(gm)
        self._root = root
        self._keep = keep
        self._steps = itertools.count()
        self._folder = root

    def __call__(self, *args: Any) -> Any:
        self._folder = os.path.join(self._root, str(next(self._steps)))
        os.makedirs(self._folder, exist_ok=True)
        with torch.no_grad():
            return self.run(*args)

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op != "call_function" or (self._keep is not None and not self._keep(n)):
            return super().run_node(n)
        stamp = datetime.now(tz=UTC).strftime("%Y%m%d%H%M%S%f")
        prefix = f"{n.name}-{n.target}"
        # Inputs are saved before the operator runs: an in-place operator changes them.
        args: Any = self.map_nodes_to_values(n.args, n)
        for index, arg in enumerate(args):
            if isinstance(arg, (list, tuple)) and arg and isinstance(arg[0], torch.Tensor):
                for inner, tensor in enumerate(arg):
                    _save(self._folder, f"{prefix}.INPUT.{index}.{inner}.{stamp}", tensor)
            else:
                _save(self._folder, f"{prefix}.INPUT.{index}.{stamp}", arg)
        result = super().run_node(n)
        outputs = result if isinstance(result, (list, tuple)) else [result]
        for index, output in enumerate(outputs):
            _save(self._folder, f"{prefix}.OUTPUT.{index}.{stamp}", output)
        return result


def data_dumper(gm: torch.fx.GraphModule, dump: DataDump, name: str) -> Callable[..., Any]:
    """The callable that runs ``gm`` node by node, dumping what ``dump`` keeps."""
    root = os.path.join(dump.folder or os.getcwd(), _rank_folder(), name)
    logger.info(
        "FX graph %s runs eagerly (debug.data_dump is set): operator inputs and outputs go to %s",
        name,
        root,
    )
    return _Dumper(gm, root, dump.keep)


# -- debug.fx_summary: the operator statistics of an FX graph, as a CSV file -------------------


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
