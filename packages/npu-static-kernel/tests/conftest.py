"""npu-static-kernel test setup: a read-only build directory never sends a build to ``~/.cache``."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _fallback_dir_in_tmp(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    path = tmp_path_factory.mktemp("fallback")
    monkeypatch.setenv("NPU_STATIC_KERNEL_FALLBACK_DIR", str(path))
    return path
