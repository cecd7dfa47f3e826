"""Every ``CompilerConfig`` option row of the README, set the way a TorchAir script sets it.

TorchAir's option classes (``torchair/configs/*.py``) define each path with a default and the
values it accepts; the table below lists, per path, a non-default value TorchAir accepts. Each
README row is checked: the path exists with the README's default (TorchAir's, except ``mode``),
TorchAir's value is accepted and reads back with TorchAir's ``.value`` form, and the status holds
(an implemented option compiles and runs silently, a no-effect one warns once naming the path
when the backend is made).
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Any

import npu_compile as tng
import pytest
import torch
from npu_compile import NoEffectWarning
from npu_compile.configs.compiler_config import CompilerConfig

from ._readme import table, unquote

ROWS = table("### `CompilerConfig` options")


def _pass(gm: Any, example_inputs: Any, config: Any) -> None:
    return None


# path -> a value TorchAir's option accepts that differs from the default. "<dir>" / "<file>" /
# "<json>" stand for an existing directory / file / .json file (TorchAir checks they exist).
ALTERNATE: dict[str, object] = {
    "mode": "npugraph_ex",
    "post_grad_custom_pre_pass": _pass,
    "post_grad_custom_post_pass": _pass,
    "debug.graph_dump.type": "py",
    "debug.graph_dump.path": "<dir>",
    "debug.fx_summary.path": "<dir>",
    "debug.data_dump.type": "npy",
    "debug.data_dump.path": "<dir>",
    "debug.data_dump.filter": _pass,
    "debug.fx_summary.type": "csv",
    "debug.fx_summary.skip_compile": False,
    "debug.aclgraph.static_capture_size_limit": 8,
    "debug.aclgraph.capture_error_mode": "relaxed",
    "aoe_config.aoe_mode": "2",
    "aoe_config.work_path": "<dir>",
    "aoe_config.aoe_config_file": "<file>",
    "export.export_path_dir": "<dir>",
    "export.export_name": "exported",
    "export.weight_name": {1: "w"},
    "export.inputs_name": {1: "x"},
    "dump_config.dump_path": "<dir>",
    "dump_config.dump_mode": "input",
    "dump_config.dump_step": "0|1|2-5|6",
    "dump_config.dump_layer": "Mul_1 Add1 Conv2D_1",
    "dump_config.dump_data": "stats",
    "dump_config.dump_config_path": "<json>",
    "dump_config.data_dump_stage": "original",
    "fusion_config.fusion_switch_file": "<file>",
    "experimental_config.static_model_ops_lower_limit": 4,
    "experimental_config.jit_compile": "auto",  # TorchAir accepts nothing else
    "experimental_config.aot_config_output_loss_index": 1,
    "experimental_config.topology_sorting_strategy": "StableRDFS",
    "experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir": "<dir>",
    "experimental_config.aclgraph._aclnn_static_shape_kernel_fallback_dir": "<dir>",
    "experimental_config.aclgraph._aclnn_static_shape_kernel_sym_value_range": [1, 2],
    "experimental_config.aclgraph._aclnn_static_shape_kernel_sym_index": 1,
    "experimental_config.aclgraph._super_kernel_optimize_options": {"k": "v"},
    "experimental_config.aclgraph._super_kernel_debug_options": {"k": "v"},
    "inference_config.dynamic_gears_merge_policy": "product",
    "ge_config.oo_level": "O1",
    "ge_config.oo_constant_folding": False,
    "ge_config.oo_dead_code_elimination": True,
    "ge_config.export_compile_stat": "1",
    "ge_config.aicore_num": "2|2",
    "ge_config.optimization_switch": "pass1:off",
    "aclgraph_config.use_custom_pool": (11, 0),
    "aclgraph_config.splitting_ops": ["aten::relu"],
    "aclgraph_config.capture_sizes": [1, 2],
    "aclgraph_config.capture_sizes_dim": 1,
}
# Options that need a device to mean anything: set, compiled, but static kernels would build.
DO_NOT_RUN = {"experimental_config.aclgraph._aclnn_static_shape_kernel"}


def _alternate(path: str, default: object, tmp_path: Path) -> object:
    value = ALTERNATE.get(path)
    if value is None:
        assert isinstance(default, bool), f"give {path} a TorchAir value in ALTERNATE"
        return not default
    if value == "<dir>":
        return str(tmp_path)
    if value in ("<file>", "<json>"):
        target = tmp_path / ("options.json" if value == "<json>" else "switch.cfg")
        target.write_text("{}")
        return str(target)
    return value


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
    value = _alternate(path, default, tmp_path)
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
