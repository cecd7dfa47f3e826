"""A configured npu-compile backend, for vLLM's ``compilation_config["backend"]`` by name.

vLLM takes a backend as a string: a name torch registered (``"npu_compile"``, the defaults) or the
qualified name of an object, here ``"integration_tests.vllm._configured_backend.backend"``. Each
worker imports this module and compiles with the object.
"""

from __future__ import annotations

import npu_compile

config = npu_compile.CompilerConfig()
config.mode = "reduce-overhead"
# Not the default: outputs are cloned before they are returned.
config.debug.aclgraph.enable_output_clone = True

backend = npu_compile.get_npu_backend(compiler_config=config)
