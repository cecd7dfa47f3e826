"""A shipped Inductor artifact loads on a machine whose C++ compiler must not run.

The first process builds with the real compiler. The second one gets an empty Inductor cache and
a ``g++`` on ``PATH`` that answers questions (Inductor names the compiler in its kernel keys and
asks for its version) but logs and refuses every compile: loading must hit the bundled kernels
without compiling anything (no vector-ISA probe, no precompiled header, no kernel whose key
differs from the build's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import json, sys
import torch
from npu_static_kernel import StaticKernelCompiler

def graph(x, w, cache):
    y = torch.ops.aten.gelu.default(torch.ops.aten.mm.default(x, w))
    torch.ops.aten.copy_.default(cache, y)
    return (torch.ops.aten.mul.Tensor(y, 2),)

gm = torch.fx.symbolic_trace(graph)
torch.manual_seed(0)
args = [torch.randn(4, 8), torch.randn(8, 8), torch.zeros(4, 8)]
compiler = StaticKernelCompiler(sys.argv[1], strict=True)
fn = compiler.compile_static(gm, args)
cache = torch.zeros(4, 8)
(out,) = fn(args[0], args[1], cache)
(ref,) = gm(args[0], args[1], torch.zeros(4, 8))
torch.testing.assert_close(out, ref)
torch.testing.assert_close(cache, ref / 2)
print(json.dumps(vars(compiler.counters)))
"""

# Questions about the compiler (--version, -v) go to the real one; anything that writes an
# output (-o: a compile, a link, a preprocessed header) is logged and refused.
SHIM = """#!/bin/sh
for arg in "$@"; do
    if [ "$arg" = "-o" ]; then
        echo "$@" >> {log}
        exit 1
    fi
done
exec {real} "$@"
"""


def _child(build_dir: Path, inductor_cache: Path, path: str) -> dict[str, int]:
    env = {k: v for k, v in os.environ.items() if k not in ("CXX", "TORCHINDUCTOR_CACHE_DIR")}
    env |= {"PATH": path, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache)}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(build_dir)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    counters: dict[str, int] = json.loads(result.stdout.strip().splitlines()[-1])
    return counters


@pytest.mark.slow
def test_a_bundled_artifact_loads_without_running_the_compiler(tmp_path: Path) -> None:
    real = shutil.which("g++")
    if real is None or sys.platform != "linux":
        pytest.skip("building CPU kernels needs g++ on Linux")
    build_dir = tmp_path / "build"
    first = _child(build_dir, tmp_path / "inductor-build", os.environ["PATH"])
    assert (first["builds"], first["loads"]) == (1, 1)

    shim_dir = tmp_path / "no-compiler"
    shim_dir.mkdir()
    log = tmp_path / "compiles.log"
    shim = shim_dir / "g++"
    shim.write_text(SHIM.format(real=real, log=log))
    shim.chmod(0o755)
    second = _child(
        build_dir, tmp_path / "inductor-empty", f"{shim_dir}{os.pathsep}{os.environ['PATH']}"
    )
    compiles = log.read_text() if log.exists() else ""
    assert compiles == "", f"loading ran the C++ compiler:\n{compiles[:2000]}"
    assert (second["builds"], second["hits"], second["loads"]) == (0, 1, 1)
