"""A static-kernel cache baked into an image (read-only) through npu-compile's options.

A hit in the read-only build directory loads from it; a miss builds into the fallback directory
that ``experimental_config.aclgraph._aclnn_static_shape_kernel_fallback_dir`` names, with one
``CacheFallbackWarning`` and not a byte written to the build directory.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import npu_compile
import pytest
import torch
from npu_static_kernel import ArtifactCache, CacheFallbackWarning

from integration_tests._static_kernels import static_kernel_config


def _run(config: npu_compile.CompilerConfig, device: torch.device, *sizes: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).to(device)
    backend = npu_compile.get_npu_backend(compiler_config=config)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad():
        for n in sizes:
            x = torch.randn(n, 8, device=device)
            torch.testing.assert_close(compiled(x), model(x))
    assert backend.stats.fallbacks == []


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*"))}


def test_read_only_build_dir_hits_there_and_builds_misses_in_the_configured_fallback(
    device: torch.device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch._dynamo.reset()
    image = tmp_path / "image"
    config = static_kernel_config(image, strict=True)  # a failed build or load raises
    _run(config, device, 2)
    assert len(ArtifactCache(image).entries()) == 1

    # The image is now read-only. Running as root ignores file modes, so the writability probe
    # of the cache is what answers, as it would for a real read-only mount.
    from npu_static_kernel import _cache

    real = _cache.can_write
    monkeypatch.setattr(
        _cache, "can_write", lambda d: False if image in (d, *d.parents) else real(d)
    )
    before = _tree(image)
    fallback = tmp_path / "writable"
    torch._dynamo.reset()
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_fallback_dir = str(fallback)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(config, device, 2, 3)
    fell_back = [w for w in caught if issubclass(w.category, CacheFallbackWarning)]
    assert len(fell_back) == 1, [str(w.message) for w in caught]
    assert str(fallback) in str(fell_back[0].message)
    assert _tree(image) == before
    assert len(ArtifactCache(fallback).entries()) == 1  # only the miss (n=3) was built
