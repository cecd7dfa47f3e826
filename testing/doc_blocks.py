"""The fenced code blocks of the documentation, run as tests with Sybil.

The root ``conftest.py`` hands every Markdown file in :data:`DOCUMENTS` to :func:`collect`: each
```` ```python ```` and ```` ```bash ```` block becomes a test item that runs the block as written,
in order, in a fresh directory per document (the blocks of one document share it and, for Python,
one namespace, as a reader pasting them one after the other would). ```` ```text ```` blocks are
output or pictures and are not run; a block with any other language, or none, fails
``integration_tests/test_docs_run.py``.

Two leading comments, which a reader sees in the rendered page, change what happens to a block:

* ``# doc-test: skip (<reason>)``: the block is not run, and the test is reported as skipped with
  the reason. Only for what CI cannot do: an NPU or a GPU, several hosts, the network.
* ``# <relative/path.py>`` (a Python file name first on the first line): the block is a file the
  reader saves; it is written to that path in the document's directory, then run.

Bash blocks run with ``bash -euo pipefail`` in the document's directory, which holds the
repository's directories (empty) so that a command writing to ``packages/<name>/changes/`` works
as it would in a checkout, with this interpreter's ``bin`` first on ``PATH`` (its console scripts).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sybil import Document, Example, Sybil
from sybil.parsers.markdown import CodeBlockParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

__all__ = [
    "DOCUMENTS",
    "LANGUAGES",
    "ROOT",
    "Block",
    "blocks",
    "collect",
    "file_block",
    "skip_reason",
]

ROOT = Path(__file__).resolve().parent.parent
#: Every Markdown file whose blocks are meant to be run by a reader.
DOCUMENTS = (
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "RELEASING.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted(ROOT.glob("packages/*/README.md")),
)
#: The languages a block may have: the first two run, ``text`` is output or a picture.
LANGUAGES = ("python", "bash", "text")

_SKIP = re.compile(r"^#\s*doc-test:\s*skip\s*\((?P<reason>.+)\)\s*$")
_FILE = re.compile(r"^#\s*(?P<path>[\w./-]+\.py)\b")
# Directories of the checkout that are not part of it (environments, caches, builds).
_NOT_COPIED = {".git", ".nox", ".venv", "build", "dist", "node_modules"}
# One block of shell commands (a CLI export, a few runs): far below this on any machine.
_BASH_SECONDS = 600


@dataclass(frozen=True)
class Block:
    """One fenced block of a document."""

    path: Path
    line: int
    language: str
    source: str


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` (any language, or none), in order."""
    document = Document(path.read_text(encoding="utf-8"), str(path))
    info = re.compile(r"(?P<language>[^\n]*)$\n", re.MULTILINE)
    lexer = RawFencedCodeBlockLexer(info_pattern=info)
    found = []
    for region in lexer(document):
        line = document.text.count("\n", 0, region.start) + 1
        language = str(region.lexemes["language"]).strip()
        found.append(Block(path, line, language, str(region.lexemes["source"])))
    return found


def _leading_comments(source: str) -> list[str]:
    lines = []
    for line in source.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def skip_reason(source: str) -> str | None:
    """The reason of a ``# doc-test: skip (<reason>)`` comment at the block's top, if any."""
    for line in _leading_comments(source):
        if match := _SKIP.match(line):
            return match.group("reason").strip()
    return None


def file_block(path: Path, name: str) -> str:
    """The source of the Python block of ``path`` that is the file ``name`` (``# name`` first)."""
    found = [
        block.source
        for block in blocks(path)
        if block.language == "python"
        and (match := _FILE.match(block.source)) is not None
        and match.group("path") == name
    ]
    if len(found) != 1:
        raise LookupError(f"{path} has {len(found)} Python blocks that are the file {name}")
    return found[0]


def _absolute_paths(source: str) -> list[str]:
    # A pasted example must not write to places like /path/test (or need root to run).
    return [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("/")
    ]


def _skip_if_marked(example: Example) -> None:
    reason = skip_reason(str(example.parsed))
    if reason is not None:
        pytest.skip(f"{Path(example.path).name}:{example.line}: {reason}")


def _run_python(example: Example) -> None:
    _skip_if_marked(example)
    source = str(example.parsed)
    absolute = _absolute_paths(source)
    assert absolute == [], f"the block uses absolute paths {absolute}"
    if match := _FILE.match(source):
        target = Path.cwd() / match.group("path")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source, encoding="utf-8")
    # Line numbers of a failure are the document's own.
    padded = "\n" * (example.line + example.parsed.line_offset) + source
    exec(compile(padded, example.path, "exec", dont_inherit=True), example.namespace)


def _run_bash(example: Example) -> None:
    _skip_if_marked(example)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", str(example.parsed)],
        cwd=Path.cwd(),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=_BASH_SECONDS,
        check=False,
    )
    assert done.returncode == 0, (
        f"the block exited with {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


def _skeleton(target: Path) -> None:
    """The repository's directories, empty, under ``target``."""
    for here, names, _ in os.walk(ROOT):
        names[:] = sorted(
            name
            for name in names
            if name not in _NOT_COPIED and not name.startswith(".") and name != "__pycache__"
        )
        relative = Path(here).relative_to(ROOT)
        (target / relative).mkdir(parents=True, exist_ok=True)


def _setup(namespace: dict[str, Any]) -> None:
    import torch

    directory = Path(tempfile.mkdtemp(prefix="doc-test-"))
    _skeleton(directory)
    namespace["__name__"] = "__main__"  # as `python file.py` runs what a reader pastes
    namespace["_doc_test_cwd"] = (os.getcwd(), directory)
    os.chdir(directory)
    # Each document compiles from scratch: no graph of another document answers its calls.
    torch._dynamo.reset()
    sys.path.insert(0, str(directory))  # files the document wrote import like the reader's


def _teardown(namespace: dict[str, Any]) -> None:
    import torch

    previous, directory = namespace.pop("_doc_test_cwd")
    os.chdir(previous)
    if str(directory) in sys.path:
        sys.path.remove(str(directory))
    torch._dynamo.reset()
    shutil.rmtree(directory, ignore_errors=True)


_SYBIL = Sybil(
    parsers=[
        CodeBlockParser(language="python", evaluator=_run_python),
        CodeBlockParser(language="bash", evaluator=_run_bash),
    ],
    path=str(ROOT),
    patterns=["*.md"],
    setup=_setup,
    teardown=_teardown,
)
_COLLECT: Callable[[Path, Any], Any] = _SYBIL.pytest()


def collect(file_path: Path, parent: Any) -> Any:
    """``pytest_collect_file`` for the documents: their blocks as items, or ``None``."""
    if file_path.resolve() not in DOCUMENTS:
        return None
    return _COLLECT(file_path, parent)
