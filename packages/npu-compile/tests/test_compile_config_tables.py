"""The README's option tables are what the options' declarations say."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest
from npu_compile.configs import _tables
from npu_compile.configs._options import _Option
from npu_compile.configs._validators import boolean
from npu_compile.configs.compiler_config import NPUGRAPH_EX_OPTIONS, CompilerConfig

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_tables_are_the_declarations() -> None:
    text = README.read_text(encoding="utf-8")
    assert _tables.updated(text) == text, (
        "the option tables of packages/npu-compile/README.md differ from the options' "
        f"declarations (configs/); regenerate them: {_tables.REGENERATE}"
    )


def test_every_option_and_every_key_has_a_row() -> None:
    tables = _tables.readme_tables()
    options = tables[_tables.OPTIONS_HEADING].splitlines()[2:]
    keys = tables[_tables.KEYS_HEADING].splitlines()[2:]
    assert len(options) == len(list(CompilerConfig().options()))
    assert len(keys) == len(NPUGRAPH_EX_OPTIONS)
    assert "| `inplace_pass` | not `debug.aclgraph.disable_reinplace_inplaceable_ops_pass` |" in (
        "\n".join(keys)
    )
    # A no-effect option shows the README wording of its reason.
    assert (
        '| `ge_config.oo_level` | `"O3"` | accepted, no effect (warns once) | Graph Engine '
        "(max-autotune) option; no GE runs here |" in options
    )


def test_check_fails_on_a_stale_table_and_write_mends_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "README.md"
    text = _tables.updated(README.read_text(encoding="utf-8"))
    stale.write_text(text.replace("| mode 2 off |", "| mode two off |"), encoding="utf-8")
    assert _tables.main(["--check", str(stale)]) == 1
    out = capsys.readouterr().out
    assert "-| `debug.aclgraph.disable_mempool_reuse_in_same_fx`" in out
    assert _tables.REGENERATE in out
    assert _tables.main(["--write", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == text
    assert _tables.main(["--check", str(stale)]) == 0


def test_a_readme_without_the_tables_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "README.md"
    other.write_text("# nothing here\n", encoding="utf-8")
    assert _tables.main(["--check", str(other)]) == 2
    assert "has no line" in capsys.readouterr().err


def test_the_command_line_says_what_each_argument_does(
    argparse_problems: Callable[[argparse.ArgumentParser], list[str]],
) -> None:
    assert argparse_problems(_tables.parser()) == []


def test_a_declaration_says_what_it_lacks() -> None:
    with pytest.raises(TypeError, match="give example="):
        _Option[int](0, lambda path, value: 0, "a number")
    with pytest.raises(TypeError, match="only a boolean option with a key is inverted"):
        _Option(False, boolean, "a switch", inverted=True)
    assert _Option(False, boolean, "a switch").example is True
