"""The ``vllm.platform_plugins`` entry point: npu-compile's platform, only when asked for.

Installing npu-compile must not change how vLLM runs, so the plugin stays off unless
``NPU_COMPILE_VLLM_PLATFORM=1``. Then it names a subclass of the platform vLLM would have
picked (CUDA, CPU, or vllm-ascend's NPU platform) whose compile backend is
:class:`~npu_compile.vllm.NpuCompilerInterface` and whose static-graph wrapper is
:class:`~npu_compile.vllm.NpuGraphWrapper`. On Ascend, vllm-ascend's own platform plugin must be
left out (``VLLM_PLUGINS``), since vLLM activates one out-of-tree platform only.
"""

from __future__ import annotations

import importlib.util
import os

__all__ = ["platform_plugin", "enabled", "ENABLE_VARIABLE"]

#: The environment variable that turns the platform plugin on.
ENABLE_VARIABLE = "NPU_COMPILE_VLLM_PLATFORM"


def enabled() -> bool:
    """Whether ``NPU_COMPILE_VLLM_PLATFORM`` asks for npu-compile's platform."""
    return os.environ.get(ENABLE_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def platform_plugin() -> str | None:
    """The qualified name of npu-compile's platform class, or ``None`` when not asked for."""
    if not enabled():
        return None
    # Detection only: importing vllm.platforms here would recurse into platform resolution.
    if importlib.util.find_spec("vllm_ascend") is not None:
        return "npu_compile.vllm._platforms.NpuCompileAscendPlatform"
    import torch

    if torch.cuda.is_available():
        return "npu_compile.vllm._platforms.NpuCompileCudaPlatform"
    return "npu_compile.vllm._platforms.NpuCompileCpuPlatform"
