"""vLLM's ``CompilerInterface`` backed by npu-compile: passes and static kernels per piece.

In vLLM's own compilation mode (``VLLM_COMPILE``), vLLM splits the model at its splitting ops,
compiles each piece with the platform's compiler and captures graphs itself with the platform's
static-graph wrapper (:class:`~npu_compile.vllm.NpuGraphWrapper` under the npu-compile platform).
So this compiler captures nothing: it runs npu-compile's pipeline on each piece (AOT autograd, the
post-grad and reinplace passes, static kernels when asked) and returns the piece to run, as
vllm-ascend runs TorchAir's ``npugraph_ex`` with capture off.

Options: ``compilation_config={"inductor_compile_config": {"npu_compile_options": {...}}}`` with
TorchAir ``npugraph_ex`` option names (``"static_kernel_compile": True``, ...); vLLM hands that
dict to every compile call and hashes it into its cache key.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from vllm.compilation.compiler_interface import CompilerInterface

from npu_compile._version import __version__
from npu_compile.backend import NpuBackend
from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.errors import ConfigError

__all__ = ["NpuCompilerInterface", "OPTIONS_KEY"]

logger = logging.getLogger("npu_compile")

#: The key of ``inductor_compile_config`` that holds npu-compile's options.
OPTIONS_KEY = "npu_compile_options"


def _options(compiler_config: Mapping[str, Any] | None) -> dict[str, Any]:
    options = (compiler_config or {}).get(OPTIONS_KEY) or {}
    if not isinstance(options, Mapping):
        raise ConfigError(
            f"inductor_compile_config[{OPTIONS_KEY!r}] must be a dict of npugraph_ex option "
            f"names to values, got {type(options).__name__}"
        )
    return dict(options)


class NpuCompilerInterface(CompilerInterface):
    """npu-compile as the compiler of each piece vLLM hands over (no capture: vLLM's wrapper does).

    ``compile`` returns the piece's callable and a handle (the options it was built with);
    ``load`` builds it again from the graph vLLM kept, with the same options, reading static
    kernels from the build directory under vLLM's cache (no kernel is built twice).
    """

    name = "npu_compile"

    def __init__(self) -> None:
        self._build_dir: str | None = None
        # One backend per set of options, kept: its statistics are what the worker reports.
        self._backends: dict[str, NpuBackend] = {}

    def initialize_cache(
        self, cache_dir: str, disable_cache: bool = False, prefix: str = ""
    ) -> None:
        """Keep static kernels in ``<cache_dir>/npu_compile`` (or the config's directory)."""
        self._build_dir = None if disable_cache else os.path.join(cache_dir, "npu_compile")

    def compute_hash(self, vllm_config: Any) -> str:
        """npu-compile's version and torch's: a new one must not load the old pieces."""
        factors = f"npu_compile={__version__};torch={torch.__version__}"
        return hashlib.sha256(factors.encode()).hexdigest()[:10]

    def _backend(self, compiler_config: Mapping[str, Any] | None) -> NpuBackend:
        options = _options(compiler_config)
        key = repr(sorted(options.items()))
        backend = self._backends.get(key)
        if backend is None:
            backend = self._backends[key] = self._new_backend(options)
        return backend

    def _new_backend(self, options: dict[str, Any]) -> NpuBackend:
        config = CompilerConfig().with_options(options)
        # vLLM's static-graph wrapper captures; this compiler only prepares the piece. vLLM's
        # cache directory is the static kernels' default, not written into the options.
        return NpuBackend(config, capture=False, static_kernel_build_dir=self._build_dir)

    def compile(
        self,
        graph: torch.fx.GraphModule,
        example_inputs: list[Any],
        compiler_config: dict[str, Any],
        compile_range: Any = None,
        key: str | None = None,
    ) -> tuple[Callable[..., Any] | None, Any | None]:
        """Run npu-compile's pipeline on one piece; the handle records its options."""
        backend = self._backend(compiler_config)
        compiled = backend(graph, example_inputs)
        return compiled, {"options": _options(compiler_config), "version": __version__}

    def load(
        self,
        handle: Any,
        graph: torch.fx.GraphModule,
        example_inputs: list[Any],
        graph_index: int,
        compile_range: Any = None,
    ) -> Callable[..., Any]:
        """Build the piece again from ``graph`` with the options in ``handle``.

        Raises:
            ConfigError: The handle was written by another npu-compile version.
        """
        if not isinstance(handle, dict) or handle.get("version") != __version__:
            raise ConfigError(
                f"compile cache entry written by npu-compile {handle!r}, this is {__version__}: "
                "delete vLLM's compile cache to compile again"
            )
        backend = self._backend({OPTIONS_KEY: handle.get("options") or {}})
        return backend(graph, example_inputs)
