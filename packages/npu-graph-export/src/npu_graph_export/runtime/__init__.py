"""Reference runtime: execute an exported GE graph with numpy (no torch import).

It proves an export is faithful: outputs match the eager model within dtype tolerance. It
implements the operators the exporter writes, with their GE semantics, one at a time and
without optimisation. Collectives have no other ranks here: by default they raise, and
``collectives="replicated"`` computes them as if every rank held this process's input.

Model files are untrusted input: weight files are read only inside the model's directory (or
``weights_dir``), and loading and running stay within ``max_bytes`` of memory (checked before
each allocation, :class:`~npu_graph_export.MemoryLimitError` otherwise).

Example:
    >>> import numpy as np
    >>> import torch
    >>> from npu_graph_export import dynamo_export, runtime
    >>> model = torch.nn.Linear(4, 2)
    >>> x = torch.randn(3, 4)
    >>> _ = dynamo_export(x, model=model, export_path="export_file")  # torch writes the graph
    >>> (y,) = runtime.load("export_file").run(x.numpy())  # numpy runs it
    >>> np.allclose(y, model(x).detach().numpy(), atol=1e-6)
    True
"""

from __future__ import annotations

from npu_graph_export.runtime._model import Model, load
from npu_graph_export.runtime._parse import TensorInfo

__all__ = ["load", "Model", "TensorInfo"]
