"""The documentation's code blocks are all run, or say why not.

The blocks themselves run as test items of their own (Sybil, ``testing/doc_blocks.py``, collected
by the root ``conftest.py`` from the documents ``nox -s integration`` names). These tests check
that nothing escapes that: every block has a language the doc test knows, Sybil finds every
Python and Bash block, and a block that is not run says why in a comment the reader sees.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from doc_blocks import DOCUMENTS, LANGUAGES, ROOT, Block, blocks, skip_reason
from sybil import Sybil
from sybil.parsers.markdown import CodeBlockParser

ALL_BLOCKS = [block for path in DOCUMENTS for block in blocks(path)]
RUNNABLE = [block for block in ALL_BLOCKS if block.language in ("python", "bash")]
# What a skipped block may lack here: hardware, hosts, the network, or CI runs it elsewhere.
REASON = re.compile(r"^(needs |CI runs )")


def _name(block: Block) -> str:
    return f"{block.path.relative_to(ROOT)}:{block.line}"


def test_the_documents_exist_and_have_blocks() -> None:
    assert all(path.is_file() for path in DOCUMENTS)
    names = {str(path.relative_to(ROOT)) for path in DOCUMENTS}
    assert {"README.md", "CONTRIBUTING.md", "docs/serving-vllm.md"} <= names
    assert len([n for n in names if n.startswith("packages/")]) == 5
    # Every README shows a Python example that runs here.
    readmes = [path for path in DOCUMENTS if path.name == "README.md"]
    shown = {
        block.path
        for block in RUNNABLE
        if block.language == "python" and not skip_reason(block.source)
    }
    assert set(readmes) <= shown, sorted(str(p) for p in set(readmes) - shown)


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=_name)
def test_every_block_has_a_language_the_doc_test_knows(block: Block) -> None:
    # A block with no language (or another one) would be neither run nor marked.
    assert block.language in LANGUAGES, (
        f"{_name(block)}: ```{block.language} is not one of {LANGUAGES}"
    )


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_sybil_finds_every_python_and_bash_block(path: Path) -> None:
    sybil = Sybil(
        parsers=[
            CodeBlockParser(language="python", evaluator=lambda example: None),
            CodeBlockParser(language="bash", evaluator=lambda example: None),
        ]
    )
    found = sorted(example.line for example in sybil.parse(path).examples())
    expected = sorted(block.line for block in RUNNABLE if block.path == path)
    assert found == expected


def test_skipped_blocks_say_why_and_are_few() -> None:
    skipped = {_name(block): skip_reason(block.source) for block in RUNNABLE}
    skipped = {name: reason for name, reason in skipped.items() if reason is not None}
    wrong = {name: reason for name, reason in skipped.items() if not REASON.match(reason or "")}
    assert wrong == {}, "a skip says what CI lacks: (needs ...) or (CI runs ...)"
    # Most blocks run: a skip is for what CI cannot do.
    assert len(skipped) <= len(RUNNABLE) // 2, skipped


def test_the_quick_start_is_what_ci_runs() -> None:
    # The README's first block is skipped because .ci/run runs its nox commands itself.
    quick_start = next(b for b in RUNNABLE if b.path == ROOT / "README.md")
    assert skip_reason(quick_start.source) == "CI runs these two commands itself, in .ci/run"
    commands = []
    for line in quick_start.source.splitlines():
        code = line.split("#", 1)[0]
        for part in code.split("&&"):
            words = shlex.split(part)
            if words and words[0] == "nox":
                commands.append(words)
    assert commands == [["nox", "-s", "demo"], ["nox"]]
    ci = [line.split() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    ran = [words[2:] for words in ci if words[:3] == ["python3", "-m", "nox"]]
    assert ran == commands
