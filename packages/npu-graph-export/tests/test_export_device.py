"""Exporting a model that lives on an accelerator (CUDA or NPU): same graph, same numbers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from npu_graph_export import dynamo_export, runtime


@pytest.mark.device
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_accelerator_model_exports_and_matches_eager(
    tmp_path: Path,
    decoder: Callable[..., torch.nn.Module],
    make_tokens: Callable[..., torch.Tensor],
    name: str,
) -> None:
    accelerator = torch.accelerator.current_accelerator()
    assert accelerator is not None
    model = decoder(name).to(accelerator)
    ids = make_tokens(2, 8).to(accelerator)
    dynamo_export(ids, model=model, export_path=tmp_path, dynamic=True)
    run_ids = make_tokens(3, 6, seed=7)
    (got,) = runtime.load(tmp_path).run(run_ids.numpy())
    with torch.no_grad():
        expected = model(run_ids.to(accelerator)).float().cpu().numpy()
    # Device matmuls may use TF32 or other reduced-precision paths.
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=2e-3)
