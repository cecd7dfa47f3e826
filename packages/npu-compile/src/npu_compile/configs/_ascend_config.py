"""GE and Ascend runtime groups: accepted with TorchAir's names and checks, no effect here."""

from __future__ import annotations

from npu_compile.configs._effects import ASCEND, GE
from npu_compile.configs._options import _Node, _Option
from npu_compile.configs._validators import (
    boolean,
    choice,
    existing_dir,
    existing_file_or_none,
    matches,
    optional_bool,
    optional_choice,
    str_or_none,
)

__all__ = ["AoeConfig", "DumpConfig", "FusionConfig", "GeConfig", "InferenceConfig"]


class AoeConfig(_Node):
    """``aoe_config``: CANN's AOE tuning of GE graphs; accepted, no effect here."""

    aoe_mode = _Option[str | None](
        None, optional_choice("2"), "AOE tuning mode", effect=GE, example="2"
    )
    work_path = _Option("./", existing_dir, "AOE work folder", effect=GE, example="<dir>")
    aoe_config_file = _Option[str | None](
        None, existing_file_or_none(), "AOE config file", effect=GE, example="<file>"
    )


class DumpConfig(_Node):
    """``dump_config``: tensor dumps by the Ascend runtime; accepted, no effect here."""

    enable_dump = _Option(False, boolean, "tensor dump", effect=ASCEND, key="dump_tensor_data")
    dump_path = _Option(
        "./", existing_dir, "dump folder", effect=ASCEND, key="data_dump_dir", example="<dir>"
    )
    dump_mode = _Option(
        "all", choice("input", "output", "all"), "dump mode", effect=ASCEND, example="input"
    )
    quant_dumpable = _Option(False, boolean, "dump quantised ops", effect=ASCEND)
    dump_step = _Option(
        "",
        matches(r"^(((\d+)|(\d+-{0,1}\d+))\|{0,1})*$", "0|1|2-5|6"),
        "steps",
        effect=ASCEND,
        example="0|1|2-5|6",
    )
    dump_layer = _Option(
        "",
        matches(r"^[0-9a-zA-Z_\" /\\.]*$", "Mul_1 Add1 Conv2D_1"),
        "layers",
        effect=ASCEND,
        example="Mul_1 Add1 Conv2D_1",
    )
    dump_data = _Option(
        "tensor", choice("tensor", "stats"), "dump data", effect=ASCEND, example="stats"
    )
    dump_config_path = _Option[str | None](
        None, existing_file_or_none(".json"), "acl dump config", effect=ASCEND, example="<json>"
    )
    data_dump_stage = _Option(
        "optimized",
        choice("original", "optimized"),
        "dump stage",
        effect=ASCEND,
        key="data_dump_stage",
        example="original",
    )


class FusionConfig(_Node):
    """``fusion_config``: GE fusion switches; accepted, no effect here."""

    fusion_switch_file = _Option[str | None](
        None, existing_file_or_none(), "fusion switch file", effect=GE, example="<file>"
    )


class InferenceConfig(_Node):
    """``inference_config``: GE dynamic gears; accepted, no effect here."""

    dynamic_gears_merge_policy = _Option(
        "zip", choice("zip", "product"), "gear merge policy", effect=GE, example="product"
    )


class GeConfig(_Node):
    """``ge_config``: Graph Engine options; accepted, no effect here."""

    enable_single_stream = _Option(False, boolean, "GE single stream", effect=GE)
    oo_level = _Option("O3", choice("O1", "O3"), "GE optimisation level", effect=GE, example="O1")
    oo_constant_folding = _Option[bool | None](
        None, optional_bool, "GE folding", effect=GE, example=False
    )
    oo_dead_code_elimination = _Option[bool | None](
        None, optional_bool, "GE DCE", effect=GE, example=True
    )
    export_compile_stat = _Option(
        "2", choice("0", "1", "2"), "GE compile stats", effect=GE, example="1"
    )
    aicore_num = _Option[str | None](
        None, str_or_none, "GE AI core count", effect=GE, example="2|2"
    )
    optimization_switch = _Option[str | None](
        None, str_or_none, "GE switches", effect=GE, example="pass1:off"
    )
