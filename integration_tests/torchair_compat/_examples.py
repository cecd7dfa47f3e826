"""The value TorchAir accepts for each option, from the option's declaration (its ``example``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from npu_compile.configs._options import EXAMPLE_STAND_INS
from npu_compile.configs.compiler_config import CompilerConfig

OPTIONS = dict(CompilerConfig._option_paths())


def _pass(gm: Any, example_inputs: Any, config: Any) -> None:
    return None


def example(path: str, tmp_path: Path) -> object:
    """The declared example of the option at ``path``, its stand-in made real under ``tmp_path``.

    TorchAir checks that a directory or file option names one that exists, so ``"<dir>"`` is
    ``tmp_path`` and ``"<file>"`` / ``"<json>"`` a file written there; ``"<fn>"`` is a pass that
    does nothing.
    """
    value = OPTIONS[path].example
    if not isinstance(value, str) or value not in EXAMPLE_STAND_INS:
        return value
    if value == "<dir>":
        return str(tmp_path)
    if value == "<fn>":
        return _pass
    target = tmp_path / ("options.json" if value == "<json>" else "switch.cfg")
    target.write_text("{}")
    return str(target)
