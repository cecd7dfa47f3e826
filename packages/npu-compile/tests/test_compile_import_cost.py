"""``import npu_compile`` loads what compiling needs, not what exporting or tracing needs.

A user who never exports must not pay at every start for npu-graph-export's converters, torch's
symbolic shapes and sympy (about half a second on CPU), nor for Dynamo and Inductor, which
``torch.compile`` loads when it first compiles.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Loaded only once their feature is used.
HEAVY = (
    "sympy",
    "torch.fx.experimental.symbolic_shapes",
    "npu_graph_export._export",
    "npu_graph_export._converters",
    "npu_graph_export._proto",
    "google.protobuf",
    "torch._dynamo",
    "torch._inductor",
    "transformers",
)


@pytest.mark.parametrize("module", ["npu_compile", "npu_compile.backend"])
def test_importing_loads_no_export_tracing_or_sympy_module(module: str) -> None:
    code = (
        "import sys, torch\n"
        "before = set(sys.modules)\n"
        f"import {module}\n"
        f"print(','.join(sorted(m for m in {HEAVY!r} if m in sys.modules and m not in before)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "", f"import {module} loaded: {done.stdout.strip()}"


def test_export_still_loads_on_first_use() -> None:
    code = (
        "import sys, npu_compile\n"
        "assert 'npu_graph_export._export' not in sys.modules\n"
        "npu_compile.dynamo_export\n"
        "from npu_graph_export import dynamo_export\n"
        "print(callable(dynamo_export))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"
