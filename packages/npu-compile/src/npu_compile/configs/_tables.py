"""The README's two option tables, written from the options' declarations.

The ``### `CompilerConfig` options`` and ``### `torch.compile(options={...})` keys`` tables of
``packages/npu-compile/README.md`` are generated: a test fails when they differ from what the
declarations say, and this module rewrites them::

    python -m npu_compile.configs._tables --write packages/npu-compile/README.md
    python -m npu_compile.configs._tables --check packages/npu-compile/README.md
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from npu_compile.configs._effects import README_NOTES
from npu_compile.configs._options import _Option
from npu_compile.configs.compiler_config import NPUGRAPH_EX_OPTIONS, CompilerConfig

__all__ = ["OPTIONS_HEADING", "KEYS_HEADING", "readme_tables", "updated", "main"]

OPTIONS_HEADING = "### `CompilerConfig` options"
KEYS_HEADING = "### `torch.compile(options={...})` keys"

IMPLEMENTED = "implemented"
NO_EFFECT = "accepted, no effect (warns once)"

REGENERATE = "python -m npu_compile.configs._tables --write packages/npu-compile/README.md"


def _literal(value: object) -> str:
    # Strings in double quotes, as the README writes Python values; the rest as Python spells it.
    if isinstance(value, str) and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return repr(value)


def status(option: _Option[Any]) -> str:
    """The status cell: implemented, or accepted with no effect."""
    return IMPLEMENTED if option.effect is None else NO_EFFECT


def note(option: _Option[Any]) -> str:
    """The notes cell: the option's ``note``, else the README wording of why it has no effect."""
    if option.note or option.effect is None:
        return option.note
    return README_NOTES.get(option.effect, option.effect)


def _row(*cells: str) -> str:
    for cell in cells:
        if "|" in cell or "\n" in cell:
            raise ValueError(f"a README cell holds '|' or a line break: {cell!r}")
    return "| " + " | ".join(cells) + " |"


def options_table() -> list[str]:
    """Every option of the tree, depth first in declared order: path, default, status, notes."""
    lines = ["| option path | default | status | notes |", "|---|---|---|---|"]
    for path, option in CompilerConfig._option_paths():
        lines.append(
            _row(f"`{path}`", f"`{_literal(option.default)}`", status(option), note(option))
        )
    return lines


def keys_table() -> list[str]:
    """Every ``torch.compile`` key, in the tree's order: key, the path it sets, its status."""
    options = dict(CompilerConfig._option_paths())
    lines = ["| key | config path | status |", "|---|---|---|"]
    for key, (path, inverted) in NPUGRAPH_EX_OPTIONS.items():
        target = f"not `{path}`" if inverted else f"`{path}`"
        lines.append(_row(f"`{key}`", target, status(options[path])))
    return lines


def readme_tables() -> dict[str, str]:
    """``{heading: table}`` for the README's two option tables, as Markdown."""
    return {
        OPTIONS_HEADING: "\n".join(options_table()),
        KEYS_HEADING: "\n".join(keys_table()),
    }


def updated(text: str) -> str:
    """``text`` (the README) with the table under each heading replaced by the generated one."""
    lines = text.split("\n")
    for heading, table in readme_tables().items():
        if heading not in lines:
            raise ValueError(f"the README has no line {heading!r}")
        start = lines.index(heading) + 1
        while start < len(lines) and not lines[start].startswith(("|", "#")):
            start += 1
        end = start
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        if start == end:
            raise ValueError(f"no table under {heading!r} in the README")
        lines[start:end] = table.split("\n")
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def parser() -> argparse.ArgumentParser:
    """The command line: ``--check`` or ``--write`` one README."""
    result = argparse.ArgumentParser(
        prog="python -m npu_compile.configs._tables",
        description="Check or rewrite the README's option tables from the options' declarations.",
    )
    mode = result.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--check", action="store_true", help="exit 1, printing the difference, if they differ"
    )
    mode.add_argument("--write", action="store_true", help="rewrite the tables in place")
    result.add_argument("readme", type=Path, help="packages/npu-compile/README.md")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Check (exit 1 when they differ) or rewrite the option tables of a README."""
    args = parser().parse_args(argv)
    path: Path = args.readme
    try:
        text = path.read_text(encoding="utf-8")
        expected = updated(text)
    except (OSError, ValueError) as error:
        print(f"error: {path}: {error}", file=sys.stderr)
        return 2
    if args.write:
        if expected != text:
            _write(path, expected)
        return 0
    if expected == text:
        return 0
    diff = difflib.unified_diff(
        text.splitlines(), expected.splitlines(), str(path), "generated", lineterm=""
    )
    print("\n".join(diff))
    print(f"{path}: the option tables differ from the declarations; run: {REGENERATE}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
