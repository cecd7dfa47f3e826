"""Static kernels built while other threads compile and load: torch traces one graph at a time."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
import torch
from npu_compile import get_npu_backend

from integration_tests._static_kernels import static_kernel_config


def _model(seed: int, width: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.LayerNorm(width),
        torch.nn.Linear(width, 4 * width),
        torch.nn.GELU(),
        torch.nn.Linear(4 * width, width),
    )


def test_models_first_called_at_once_from_threads_keep_their_static_kernels(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Each thread's first call compiles its model (Dynamo and AOT tracing) and builds, loads
    # and checks its static kernels (Inductor tracing, saving, loading), all at the same time.
    caplog.set_level(logging.WARNING, logger="npu_static_kernel")
    config = static_kernel_config(tmp_path, strict=True)  # a failed build is an error
    count = 3
    models = [_model(seed, 32 + 16 * seed) for seed in range(count)]
    backends = [get_npu_backend(compiler_config=config) for _ in range(count)]
    compiled = [
        torch.compile(m, backend=b, dynamic=False) for m, b in zip(models, backends, strict=True)
    ]
    inputs = [torch.randn(4, 32 + 16 * seed) for seed in range(count)]
    start = threading.Barrier(count)
    errors: list[BaseException] = []
    outputs: dict[int, torch.Tensor] = {}

    def first_call(i: int) -> None:
        try:
            start.wait()
            with torch.no_grad():
                outputs[i] = compiled[i](inputs[i]).clone()
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=first_call, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with torch.no_grad():
        for i in range(count):
            torch.testing.assert_close(outputs[i], models[i](inputs[i]), rtol=1e-4, atol=1e-5)
    assert [r.getMessage() for r in caplog.records if r.name == "npu_static_kernel"] == []
    assert len(list((tmp_path / "static_kernel_cache" / "entries").iterdir())) == count
