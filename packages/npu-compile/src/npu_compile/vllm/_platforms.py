"""npu-compile's vLLM platforms: vLLM's own, with npu-compile's compiler and graph wrapper.

Each class is built on first access (``__getattr__``), so that this module imports only the
platform it is asked for (vllm-ascend is absent where CUDA runs, and the reverse).
"""

from __future__ import annotations

import importlib
from typing import Any

# The classes (NpuCompileCudaPlatform, NpuCompileCpuPlatform, NpuCompileAscendPlatform) are
# made by __getattr__, so none is listed for star imports.
__all__: list[str] = []

COMPILER = "npu_compile.vllm.NpuCompilerInterface"
GRAPH_WRAPPER = "npu_compile.vllm.NpuGraphWrapper"

_BASES = {
    "NpuCompileCudaPlatform": ("vllm.platforms.cuda", "CudaPlatform"),
    "NpuCompileCpuPlatform": ("vllm.platforms.cpu", "CpuPlatform"),
    "NpuCompileAscendPlatform": ("vllm_ascend.platform", "NPUPlatform"),
}
_built: dict[str, type] = {}


def _build(name: str) -> type:
    module, base_name = _BASES[name]
    base: type = getattr(importlib.import_module(module), base_name)

    def get_compile_backend(cls: type) -> str:
        return COMPILER

    def get_static_graph_wrapper_cls(cls: type) -> str:
        return GRAPH_WRAPPER

    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": name,
        "__doc__": f"vLLM's {base_name} with npu-compile's compiler and static-graph wrapper.",
        "get_compile_backend": classmethod(get_compile_backend),
        "get_static_graph_wrapper_cls": classmethod(get_static_graph_wrapper_cls),
    }
    if name == "NpuCompileCpuPlatform":
        namespace["check_and_update_config"] = classmethod(_cpu_check_and_update_config)
    return type(name, (base,), namespace)


def _cpu_check_and_update_config(cls: Any, vllm_config: Any) -> None:
    # vLLM's CPU platform has no static-graph mode: it turns its own compile mode into one Dynamo
    # trace with Inductor. Under npu-compile's platform that trace goes to the npu_compile
    # backend, which captures (emulated on CPU) and replays per token count.
    from vllm.config import CompilationMode

    compilation = vllm_config.compilation_config
    default_mode = compilation.mode == CompilationMode.VLLM_COMPILE
    platform: Any = _built["NpuCompileCpuPlatform"]
    super(platform, cls).check_and_update_config(vllm_config)
    if default_mode and compilation.mode == CompilationMode.DYNAMO_TRACE_ONCE:
        compilation.backend = "npu_compile"


def __getattr__(name: str) -> type:
    if name not in _BASES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = _built.get(name)
    if cls is None:
        cls = _built[name] = _build(name)
    return cls
