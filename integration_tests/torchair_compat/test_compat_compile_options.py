"""Every ``torch.compile(options={...})`` key row of the README, as npugraph_ex users pass it.

The keys are TorchAir's npugraph_ex option names (``configs/npugraphex_config.py``); each row
names the ``CompilerConfig`` path the key sets. Each key is passed to ``torch.compile`` with the
``npu_compile`` backend and a value TorchAir accepts: the model gives eager's numbers, the key set
its path, and a key without effect warns once naming the path.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import npu_compile as torchair
import pytest
import torch
from npu_compile import NoEffectWarning
from npu_compile.configs.compiler_config import NPUGRAPH_EX_OPTIONS

from ._readme import table, unquote

ROWS = table("### `torch.compile(options={...})` keys")


def _pass(gm: Any, example_inputs: Any, config: Any) -> None:
    return None


VALUES: dict[str, object] = {
    "use_graph_pool": (21, 0),  # the tuple torch.npu.graph_pool_handle() returns
    "capture_limit": 8,
    "_vllm_aclnn_static_kernel_sym_index": 1,
    "_vllm_aclnn_static_kernel_sym_range": [1, 2],
    "super_kernel_optimize_options": {"k": "v"},
    "super_kernel_debug_options": {"k": "v"},
    "post_grad_custom_pre_pass": _pass,
    "post_grad_custom_post_pass": _pass,
    "data_dump_stage": "original",
    "data_dump_dir": "<dir>",
    "capture_error_mode": "thread_local",
    "capture_sizes": [2, 4],
    "splitting_ops": ["aten::mm"],
    "static_kernel_build_dir": "<dir>",
    "static_kernel_fallback_dir": "<dir>",
    # Static kernels build for real (seed 002's suite covers that); here the key's path is set.
    "static_kernel_compile": False,
}


def test_the_table_lists_every_key() -> None:
    assert {unquote(row[0]) for row in ROWS} == set(NPUGRAPH_EX_OPTIONS)


@pytest.mark.parametrize("row", ROWS, ids=[unquote(row[0]) for row in ROWS])
def test_compile_options_row(
    row: list[str], device: torch.device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import npu_compile.backend

    # backend="npu_compile" is one backend per process, which warns once per option: start anew.
    monkeypatch.setattr(npu_compile.backend, "_default_backend", None)
    key, target, status = unquote(row[0]), row[1], row[2]
    path, inverted = NPUGRAPH_EX_OPTIONS[key]
    assert target == (f"not `{path}`" if inverted else f"`{path}`")
    default = torchair.CompilerConfig().get(path)
    value = VALUES.get(key, not default if not inverted else False)
    if value == "<dir>":
        value = str(tmp_path)
    config = torchair.CompilerConfig().with_options({key: value})
    stored = config.get(path)
    assert stored == (not value if inverted else tuple(value) if isinstance(value, list) else value)
    model = torch.compile(torch.nn.Hardtanh(), backend="npu_compile", options={key: value})
    x = torch.tensor([-3.0, 0.5, 3.0], device=device)
    with warnings.catch_warnings(record=True) as record, torch.no_grad():
        warnings.simplefilter("always")
        torch.testing.assert_close(model(x), torch.nn.functional.hardtanh(x))
    ours = [str(w.message) for w in record if issubclass(w.category, NoEffectWarning)]
    if status == "implemented" or stored == torchair.CompilerConfig().get(path):
        assert ours == []
    else:
        assert status.startswith("accepted, no effect")
        assert len(ours) == 1
        assert f"config.{path} =" in ours[0]
