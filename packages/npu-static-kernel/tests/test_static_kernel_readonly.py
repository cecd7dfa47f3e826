"""Read-only build directories: hits load from them, misses build in the fallback directory."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from npu_static_kernel import (
    FALLBACK_DIR_ENV,
    ArtifactCache,
    BuildRequest,
    CacheFallbackWarning,
    StaticKernelBuilder,
    StaticKernelCompiler,
    default_fallback_dir,
)

CHILD = """
import json, sys, warnings
import torch
from npu_static_kernel import CacheFallbackWarning, StaticKernelBuilder, StaticKernelCompiler

class ScaleBuilder(StaticKernelBuilder):
    name = "readonly-scale"

    def build(self, request, out_dir):
        (out_dir / "scale.txt").write_text(str(request.args[1]))

    def load(self, artifact_dir, request):
        scale = float((artifact_dir / "scale.txt").read_text())
        return lambda x, n: (x * scale,)

def graph(x, n):
    return (torch.ops.aten.mul.Tensor(x, n),)

gm = torch.fx.symbolic_trace(graph)
build_dir, fallback = sys.argv[1], sys.argv[2]
outputs = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compiler = StaticKernelCompiler(
        build_dir, builder=ScaleBuilder(), fallback_dir=fallback, strict=True
    )
    for n in map(int, sys.argv[3:]):
        fn = compiler.compile_static(gm, [torch.ones(2), n])
        outputs.append(fn(torch.ones(2), n)[0].tolist())
print(json.dumps({
    "counters": vars(compiler.counters),
    "outputs": outputs,
    "warnings": [str(w.message) for w in caught if issubclass(w.category, CacheFallbackWarning)],
}))
"""


def _tree(root: Path) -> dict[str, Any]:
    """Every path under ``root`` with its content (files) or None (directories)."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


def _drop_permission_override() -> None:
    """Run in the child before exec: remove root's power to ignore file modes.

    Drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the capability bounding set, so the
    program started next, though still uid 0, gets "Permission denied" like any user would.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def _as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _run_child(build_dir: Path, fallback: Path, *ns: int, read_only: bool = False) -> Any:
    command = [sys.executable, "-c", CHILD, str(build_dir), str(fallback), *map(str, ns)]
    preexec = _drop_permission_override if read_only and _as_root() else None
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, preexec_fn=preexec
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_read_only_build_dir_is_read_and_misses_build_in_the_fallback(tmp_path: Path) -> None:
    """The real thing: the OS refuses writes to the build directory (modes a-w; as root, in a
    child that lost the capability to override them)."""
    if sys.platform != "linux":
        pytest.skip("the read-only check drops Linux capabilities when run as root")
    if _as_root():
        probe = subprocess.run(
            [sys.executable, "-c", "pass"], check=False, preexec_fn=_drop_permission_override
        )
        if probe.returncode != 0:
            pytest.skip("cannot drop CAP_DAC_OVERRIDE here")
    build_dir = tmp_path / "image"
    fallback = tmp_path / "fallback"
    first = _run_child(build_dir, fallback, 2)
    assert first["counters"]["builds"] == 1
    assert first["warnings"] == []
    writable = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    tree = [build_dir, *build_dir.rglob("*")]
    for p in tree:
        p.chmod(p.stat().st_mode & ~writable)
    try:
        before = _tree(build_dir)
        report = _run_child(build_dir, fallback, 2, 3, read_only=True)
        after = _tree(build_dir)
    finally:
        for p in tree:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    assert report["outputs"] == [[2.0, 2.0], [3.0, 3.0]]
    counters = report["counters"]
    assert (counters["hits"], counters["builds"], counters["loads"]) == (1, 1, 2)
    assert counters["fallbacks"] == 0
    assert len(report["warnings"]) == 1
    assert str(fallback) in report["warnings"][0]
    assert after == before  # not a byte, lock or statistics file written there
    assert len(ArtifactCache(fallback).entries()) == 1


class ScaleBuilder(StaticKernelBuilder):
    name = "readonly-scale-inprocess"

    def __init__(self) -> None:
        self.built: list[int] = []

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        (out_dir / "scale.txt").write_text(str(request.args[1]))
        self.built.append(request.args[1])

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        scale = float((artifact_dir / "scale.txt").read_text())
        return lambda x, n: (x * scale,)


def graph(x: torch.Tensor, n: int) -> tuple[torch.Tensor]:
    return (torch.ops.aten.mul.Tensor(x, n),)


GM = torch.fx.symbolic_trace(graph)


def test_read_only_decision_writes_nothing_and_warns_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, with the writability probe answering "read-only" for the build directory."""
    from npu_static_kernel import _cache

    build_dir = tmp_path / "image"
    StaticKernelCompiler(build_dir, builder=ScaleBuilder(), strict=True).compile_static(
        GM, [torch.ones(2), 2]
    )
    real = _cache.can_write
    monkeypatch.setattr(
        _cache, "can_write", lambda d: False if build_dir in (d, *d.parents) else real(d)
    )
    before = _tree(build_dir)
    builder = ScaleBuilder()
    compiler = StaticKernelCompiler(build_dir, builder=builder, strict=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hit = compiler.compile_static(GM, [torch.ones(2), 2])
        compiler.compile_static(GM, [torch.ones(2), 3])
        StaticKernelCompiler(build_dir, builder=builder).compile_static(GM, [torch.ones(2), 4])
    assert [w.category for w in caught] == [CacheFallbackWarning]
    assert hit(torch.ones(2), 2)[0].tolist() == [2.0, 2.0]
    assert builder.built == [3, 4]
    assert (compiler.counters.hits, compiler.counters.builds) == (1, 1)
    assert _tree(build_dir) == before
    fallback = default_fallback_dir()
    assert fallback == Path(os.environ[FALLBACK_DIR_ENV])
    assert len(ArtifactCache(fallback).entries()) == 2
    assert (fallback / "aclnn_static_shape_kernel_outputs").is_dir()


def test_default_fallback_dir_follows_xdg_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FALLBACK_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_fallback_dir() == tmp_path / "npu_static_kernel"
