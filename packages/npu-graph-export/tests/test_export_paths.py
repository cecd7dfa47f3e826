"""Paths: no link below the export's parent is followed, every legal name works, full disks.

The rule is in docs/paths.md: ``export_path``'s parent (and the model's directory, or
``weights_dir``, for the runtime) is trusted as given; nothing below it is followed if it is a
symbolic link, and a file that cannot be written is an ExportWriteError that names it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from npu_graph_export import (
    ConfigError,
    ExportConfig,
    ExportPathError,
    ModelFormatError,
    dynamo_export,
    runtime,
)
from npu_graph_export._paths import write_files
from npu_graph_export.cli import main as cli_main

X = np.ones((2, 4), dtype=np.float32)


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 2).eval()


def _export(out: Path, seed: int = 0, embed_limit_bytes: int | None = None) -> np.ndarray:
    model = _model(seed)
    config = ExportConfig()
    if embed_limit_bytes is not None:
        config = ExportConfig(embed_limit_bytes=embed_limit_bytes)
    dynamo_export(torch.from_numpy(X), model=model, export_path=out, config=config)
    with torch.no_grad():
        expected: np.ndarray = model(torch.from_numpy(X)).numpy()
    return expected


def _tree(root: Path) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        found[name] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return found


# ---------------------------------------------------------------------------- links at each level

# Each place an export writes, as the writer meets it: the export directory, a rank directory,
# and a file. A link planted there after the up-front check (a race) is still not followed.
_LEVELS = ["out", "out/rank_0", "out/export0.air", "out/rank_0/dynamo.pbtxt", "out/rank_0/w"]


@pytest.mark.parametrize("level", _LEVELS)
def test_the_writer_never_writes_through_a_link_at_any_level(tmp_path: Path, level: str) -> None:
    files = {"export0.air": b"air", "rank_0/dynamo.pbtxt": b"text", "rank_0/w": b"weights"}
    write_files(tmp_path / "out", {name: b"old " + data for name, data in files.items()})
    planted = tmp_path / level
    elsewhere = tmp_path / "elsewhere"
    os.replace(planted, elsewhere)
    planted.symlink_to(elsewhere, target_is_directory=elsewhere.is_dir())
    before = _tree(elsewhere) if elsewhere.is_dir() else {"": elsewhere.read_bytes()}
    with pytest.raises(ExportPathError, match="symbolic link") as info:
        write_files(tmp_path / "out", files)
    assert str(planted) in str(info.value)
    after = _tree(elsewhere) if elsewhere.is_dir() else {"": elsewhere.read_bytes()}
    assert after == before
    staging = [p for p in tmp_path.iterdir() if p.name.startswith(".npu-graph-export-")]
    assert staging == []
    for name in files:  # all or nothing: the files of the earlier export are unchanged
        path = tmp_path / "out" / name
        if not any(p.is_symlink() for p in (path, *path.parents)):
            assert path.read_bytes().startswith(b"old ")


@pytest.mark.parametrize("level", ["out", "out/export.air", "out/dynamo.pbtxt", "out/weight"])
def test_dynamo_export_refuses_a_link_at_each_level(tmp_path: Path, level: str) -> None:
    _export(tmp_path / "out", embed_limit_bytes=0)
    planted = tmp_path / level  # "weight": the Linear's weight file (embed_limit_bytes=0)
    elsewhere = tmp_path / "elsewhere"
    os.replace(planted, elsewhere)
    planted.symlink_to(elsewhere, target_is_directory=elsewhere.is_dir())
    before = _tree(elsewhere) if elsewhere.is_dir() else {"": elsewhere.read_bytes()}
    with pytest.raises(ExportPathError, match="symbolic link"):
        _export(tmp_path / "out", seed=1, embed_limit_bytes=0)
    after = _tree(elsewhere) if elsewhere.is_dir() else {"": elsewhere.read_bytes()}
    assert after == before


def test_the_runtime_never_reads_through_a_link(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _export(out, embed_limit_bytes=0)
    elsewhere = tmp_path / "elsewhere"
    os.replace(out / "export.air", elsewhere)
    (out / "export.air").symlink_to(elsewhere)
    with pytest.raises(ModelFormatError, match="symbolic link"):
        runtime.load(out)
    runtime.load(elsewhere)  # a file the caller names is the caller's choice


def test_run_output_dir_never_writes_through_a_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    _export(out)
    results = tmp_path / "results"
    results.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (results / "output0.npy").symlink_to(victim)
    assert cli_main(["run", str(out), "--output-dir", str(results)]) == 1
    assert "symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "keep"
    (results / "output0.npy").unlink()
    assert cli_main(["run", str(out), "--output-dir", str(results)]) == 0
    assert np.load(results / "output0.npy").shape == (2, 2)


# ---------------------------------------------------------------------------- every legal name

_NAME = st.text(
    alphabet=st.sampled_from(list(" -_.'\"$;&()[]#~*?!abcXYZ019") + list("üïçéø✓日本語😀")),
    min_size=1,
    max_size=40,
).filter(lambda name: name not in {".", ".."})
_NAMES = st.one_of(
    _NAME,
    _NAME.map(lambda name: "-" + name),
    st.integers(min_value=100, max_value=250).map(lambda n: "é" * (n // 2)),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=_NAMES, external=st.booleans())
def test_every_legal_export_path_name_works(name: str, external: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / name / name
        expected = _export(out, embed_limit_bytes=0 if external else 1 << 30)
        (result,) = runtime.load(out).run(X)
        np.testing.assert_allclose(result, expected, rtol=1e-6)
        assert cli_main(["inspect", "--json", "--", str(out)]) == 0


@pytest.mark.parametrize(
    ("value", "why"),
    [("", "empty path"), ("out\0dir", "NUL byte"), ("x" * 256, "at most 255 bytes")],
    ids=["empty", "nul", "long-name"],
)
def test_export_paths_no_file_system_takes_are_config_errors_at_once(
    tmp_path: Path, value: str, why: str
) -> None:
    with pytest.raises(ConfigError, match=why):
        dynamo_export(torch.randn(2, 4), model=_model(), export_path=value)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- full disks

_FACTORY = """
import torch

def make():
    torch.manual_seed(1)
    return torch.nn.Linear(64, 64).eval(), (torch.randn(2, 64),)
"""

_FULL_DISK_CHILD = """
import json, resource, sys
import torch
from npu_graph_export import ExportConfig, ExportWriteError, dynamo_export
from npu_graph_export.cli import main

out, how = sys.argv[1], sys.argv[2]
limit = 4 << 10  # every file this process writes stops at 4 KiB: a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
if how == "cli":
    sys.exit(main(["export", "factory:make", "--export-path", out]))
from factory import make
model, args = make()
try:
    dynamo_export(*args, model=model, export_path=out, config=ExportConfig(embed_limit_bytes=0))
except ExportWriteError as error:
    print(json.dumps({"type": type(error).__name__, "message": str(error),
                      "oserror": isinstance(error, OSError)}))
"""


@pytest.mark.parametrize("how", ["api", "cli"])
def test_a_full_disk_names_the_file_and_keeps_the_earlier_export(tmp_path: Path, how: str) -> None:
    out = tmp_path / "out"
    _export(out)  # an earlier, small export that must stay intact
    before = _tree(out)
    (tmp_path / "factory.py").write_text(textwrap.dedent(_FACTORY))
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_CHILD, str(out), how],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
            "PYTHONDONTWRITEBYTECODE": "1",
        },
    )
    if how == "cli":
        assert done.returncode == 1, done.stderr
        message = done.stderr
        assert message.startswith("error: ")
        assert message.count("\n") == 1
    else:
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["type"] == "ExportWriteError"
        assert result["oserror"]
        message = result["message"]
    assert "File too large" in message
    assert f"cannot write {out}{os.sep}" in message  # the file, where it was to go
    assert "free space" in message
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["factory.py", "out"]
