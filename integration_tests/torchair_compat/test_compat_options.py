"""Every ``CompilerConfig`` option row of the README, set the way a TorchAir script sets it.

TorchAir's option classes (``torchair/configs/*.py``) define each path with a default and the
values it accepts; each option's declaration names a value TorchAir accepts (its ``example``,
other than the default where there is another). Each README row is checked: the path exists with
the README's default (TorchAir's, except ``mode``), TorchAir's value is accepted and reads back
with TorchAir's ``.value`` form, and the status holds (an implemented option compiles and runs
silently, a no-effect one warns once naming the path when the backend is made).
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import npu_compile as tng
import pytest
import torch
from npu_compile import NoEffectWarning
from npu_compile.configs.compiler_config import CompilerConfig

from ._examples import example
from ._readme import table, unquote

ROWS = table("### `CompilerConfig` options")


# Options that need a device to mean anything: set, compiled, but static kernels would build.
DO_NOT_RUN = {"experimental_config.aclgraph._aclnn_static_shape_kernel"}


def _torchair_value_form(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def test_the_table_lists_every_option_path() -> None:
    paths = [unquote(row[0]) for row in ROWS]
    assert len(paths) == len(set(paths))
    assert set(paths) == {path for path, _option, _value in CompilerConfig().options()}


@pytest.mark.parametrize("row", ROWS, ids=[unquote(row[0]) for row in ROWS])
def test_option_row(row: list[str], tmp_path: Path) -> None:
    path, default_cell, status = unquote(row[0]), unquote(row[1]), row[2]
    config = tng.CompilerConfig()
    default = config.get(path)
    if isinstance(default, str | int | bool | type(None)):
        assert default == ast.literal_eval(default_cell), f"README default of {path}"
    value = example(path, tmp_path)
    # A dump type writes into these folders, not into the current directory.
    config.debug.graph_dump.path = str(tmp_path)
    config.debug.data_dump.path = str(tmp_path)
    config.debug.fx_summary.path = str(tmp_path)
    config.set(path, value)
    read = config.get(path)
    assert read == (tuple(value) if isinstance(value, list) else value)
    node = config
    *groups, leaf = path.split(".")
    for name in groups:
        node = getattr(node, name)
    if type(read) in (str, int, bool):  # TorchAir's OptionValue.value spelling
        assert getattr(node, leaf).value == _torchair_value_form(read)
    if path in DO_NOT_RUN:
        return
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        backend = tng.get_npu_backend(compiler_config=config)
        if status == "implemented":  # runs through the whole pipeline with the option set
            model = torch.compile(torch.nn.ReLU(), backend=backend)
            with torch.no_grad():
                assert model(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]
    ours = [str(w.message) for w in record if issubclass(w.category, NoEffectWarning)]
    if status == "implemented" or read == default:
        assert ours == [], f"{path} warned: {ours}"
    else:
        assert status.startswith("accepted, no effect")
        assert len(ours) == 1
        assert f"config.{path} =" in ours[0]
