"""Every ``torch.compile(options={...})`` key row of the README, as npugraph_ex users pass it.

The keys are TorchAir's npugraph_ex option names (``configs/npugraphex_config.py``); each row
names the ``CompilerConfig`` path the key sets. Each key is passed to ``torch.compile`` with the
``npu_compile`` backend and a value TorchAir accepts (the option's declared ``example``): the model
gives eager's numbers, the key set its path, and a key without effect warns once naming the path.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import npu_compile as torchair
import pytest
import torch
from npu_compile import NoEffectWarning
from npu_compile.configs.compiler_config import NPUGRAPH_EX_OPTIONS

from ._examples import example
from ._readme import table, unquote

ROWS = table("### `torch.compile(options={...})` keys")


# Static kernels build for real (seed 002's suite covers that): this key is passed its default.
AT_DEFAULT = {"experimental_config.aclgraph._aclnn_static_shape_kernel"}


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
    if path in AT_DEFAULT:
        value = torchair.CompilerConfig().get(path)
    else:
        value = example(path, tmp_path)
        value = not value if inverted else value
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
