"""npu-compile inside vLLM: compile backend, static-graph wrapper, platform plugin, worker stats.

Install with the ``vllm`` extra (``pip install "npu-compile[vllm]"``). Nothing here imports vLLM
until a name is used, so ``import npu_compile`` stays cheap where vLLM is absent.

Two ways in:

* ``LLM(model, compilation_config={"mode": 2, "backend": "npu_compile"})``: vLLM traces the
  model once with Dynamo and hands the whole graph to the ``npu_compile`` backend, which captures
  and replays it per token count. Options go through a backend object named by its qualified
  name (``"backend": "my_module.my_backend"``, see the serving guide).
* The platform plugin (``NPU_COMPILE_VLLM_PLATFORM=1``): vLLM's own graph machinery (capture
  sizes, FULL and PIECEWISE modes, its compile cache) with :class:`NpuCompilerInterface` as the
  compiler of each piece and :class:`NpuGraphWrapper` capturing it.

``worker_extension_cls="npu_compile.vllm.NpuCompileWorkerExtension"`` adds
``llm.collective_rpc("npu_compile_stats")``: what each worker's graphs did.

On several nodes, each worker compares its node's npu-compile setup with every other node's before
the model loads, and stops with one line where they differ (a vLLM general plugin, installed with
npu-compile; ``NPU_COMPILE_VLLM_NODE_CHECK=0`` turns it off).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "NpuCompileWorkerExtension",
    "NpuCompilerInterface",
    "NpuGraphWrapper",
    "worker_stats",
]

_LAZY = {
    "NpuCompileWorkerExtension": "npu_compile.vllm._worker",
    "worker_stats": "npu_compile.vllm._worker",
    "NpuCompilerInterface": "npu_compile.vllm._compiler",
    "NpuGraphWrapper": "npu_compile.vllm._graph_wrapper",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'npu_compile.vllm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
