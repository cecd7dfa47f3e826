"""The TorchAir surface tables of npu-compile's README, parsed for the compatibility suite."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "packages" / "npu-compile" / "README.md"


def table(heading: str) -> list[list[str]]:
    """The rows (cells stripped, header and rule dropped) of the table under ``heading``."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(heading)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if not line.startswith("|"):
            if rows:
                break
            continue
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows[2:]  # header and |---| rule


def unquote(cell: str) -> str:
    """``"`x`"`` -> ``"x"``."""
    return cell.strip().strip("`")
