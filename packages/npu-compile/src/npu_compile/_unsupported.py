"""TorchAir public names npu-compile does not provide, and why (raised on attribute access)."""

from __future__ import annotations

from npu_compile.errors import UnsupportedApiError

__all__ = ["unsupported"]

_GE = "it belongs to TorchAir's Graph Engine (max-autotune) mode, which npu-compile does not run"
_ASCEND = "it needs Ascend-specific runtime support (torch_npu/CANN) that npu-compile does not use"

# module -> name -> why it is missing and what to do instead.
REFUSED: dict[str, dict[str, str]] = {
    "npu_compile": {
        "get_compiler": (
            "the aclgraph FX compiler is not exposed on its own; use "
            "npu_compile.get_npu_backend(compiler_config=...) with torch.compile"
        ),
        "register_fx_node_ge_converter": f"{_GE}; npu_graph_export has its own converter table",
        "register_replacement": (
            "pattern replacements are not supported; rewrite the graph with "
            "config.post_grad_custom_pre_pass instead"
        ),
        "use_internal_format_weight": f"{_ASCEND} (private NPU weight formats)",
        "npu_format_cast_via_cpu": f"{_ASCEND} (private NPU weight formats)",
        "inference": f"{_GE} (cache_compile and dynamic gears)",
        "llm_datadist": f"{_ASCEND} (LLM-DataDist KV transfer)",
        "ge": f"{_GE} (GE graph construction API)",
    },
    "npu_compile.ops": {
        "npu_fused_infer_attention_score": f"{_ASCEND} (an Ascend attention kernel)",
        "npu_fused_infer_attention_score_v2": f"{_ASCEND} (an Ascend attention kernel)",
        "npu_print": f"{_GE} (print from inside a GE graph); print outside the compiled region",
    },
}


def unsupported(module: str, name: str) -> AttributeError:
    """The error for ``module.name``: why a TorchAir name is missing, or a plain AttributeError."""
    why = REFUSED.get(module, {}).get(name)
    if why is None:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    return UnsupportedApiError(
        f"{module}.{name} (TorchAir's torchair{module[len('npu_compile') :]}.{name}) is not "
        f"provided: {why}"
    )
