"""Every ```python block of every README runs, in an empty directory, as a user would paste it.

A block that needs an accelerator opts out with a first line ``# doc-test: skip (<reason>)``;
the test checks that such blocks are rare and say why.
"""

from __future__ import annotations

import ast
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
READMES = [ROOT / "README.md", *sorted(ROOT.glob("packages/*/README.md"))]
SKIP = re.compile(r"#\s*doc-test:\s*skip\s*\((?P<reason>[^)]+)\)")
_FENCE = re.compile(r"^```python\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks() -> list[tuple[str, str]]:
    found = []
    for readme in READMES:
        text = readme.read_text()
        for number, match in enumerate(_FENCE.finditer(text), start=1):
            name = f"{readme.relative_to(ROOT)}#{number}"
            found.append((name, match.group("code")))
    return found


BLOCKS = _blocks()


def test_readmes_have_python_examples() -> None:
    names = {name.split("#")[0] for name, _ in BLOCKS}
    assert "README.md" in names
    assert len(names) == len(READMES), "every README shows a Python example"


def test_skipped_blocks_are_rare_and_say_why() -> None:
    skipped = [name for name, code in BLOCKS if SKIP.search(code.splitlines()[0])]
    assert len(skipped) <= 1, f"too many README blocks skip the doc test: {skipped}"


@pytest.mark.parametrize(("name", "code"), BLOCKS, ids=[name for name, _ in BLOCKS])
def test_readme_blocks_use_relative_paths(name: str, code: str) -> None:
    # A pasted example must not write to places like /path/test (or need root to run).
    absolute = [
        node.value
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("/")
    ]
    assert absolute == [], f"{name} uses absolute paths {absolute}"


@pytest.mark.parametrize(("name", "code"), BLOCKS, ids=[name for name, _ in BLOCKS])
def test_readme_block_runs(
    name: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = code.splitlines()[0] if code.strip() else ""
    if match := SKIP.search(first):
        pytest.skip(f"{name}: {match.group('reason')}")
    script = tmp_path / "block.py"
    script.write_text(code)
    monkeypatch.chdir(tmp_path)
    # Warnings are errors here as in every test: a README example should run clean.
    runpy.run_path(str(script), run_name="__main__")
