"""npu-compile options with static kernels on, as the integration tests use them."""

from __future__ import annotations

from pathlib import Path

from npu_compile import CompilerConfig


def static_kernel_config(build_dir: Path, *, strict: bool = False) -> CompilerConfig:
    """Options with ``_aclnn_static_shape_kernel`` on, building into ``build_dir``.

    Args:
        build_dir: The static-kernel build directory.
        strict: ``debug.aclgraph.strict``: a failed build or load raises instead of running the
            graph without static kernels.
    """
    config = CompilerConfig()
    static = config.experimental_config.aclgraph
    static._aclnn_static_shape_kernel = True
    static._aclnn_static_shape_kernel_build_dir = str(build_dir)
    config.debug.aclgraph.strict = strict
    return config
