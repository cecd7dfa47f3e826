"""Every script in ``examples/`` runs to completion (each checks its own numbers and exits 1
when they are wrong)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
NEEDS_TRANSFORMERS = {"hf_generate.py", "export_hf_model.py"}


def test_the_examples_exist() -> None:
    assert {p.name for p in EXAMPLES} >= {
        "hf_generate.py",
        "export_hf_model.py",
        "static_kernels.py",
        "multi_stream.py",
    }


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    if script.name in NEEDS_TRANSFORMERS:
        pytest.importorskip("transformers")
    # A fresh interpreter per script, in an empty directory: what a user running it gets.
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{script.name} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr
