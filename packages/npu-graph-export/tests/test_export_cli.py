"""``npu-graph-export export | inspect | run``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from npu_graph_export.cli import main

FACTORY = textwrap.dedent(
    """
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 3)

        def forward(self, ids):
            return torch.nn.functional.silu(self.head(self.embed(ids)))

    def build():
        torch.manual_seed(0)
        return Tiny().eval(), (torch.zeros(2, 5, dtype=torch.long),)
    """
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    (root / "tiny_factory_cli.py").write_text(FACTORY)
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.chdir(root)
    try:
        code = main(
            [
                "export",
                "tiny_factory_cli:build",
                "--export-path",
                "out",
                "--dynamic",
                "--embed-limit-bytes",
                "0",
            ]
        )
    finally:
        monkeypatch.undo()
    assert code == 0
    return root / "out"


def test_export_writes_air_pbtxt_and_weights(exported: Path) -> None:
    names = sorted(p.name for p in exported.iterdir())
    assert names == ["dynamo.pbtxt", "embed_weight", "export.air", "head_bias", "head_weight"]


def test_inspect_reports_ops_inputs_outputs_and_weight_bytes(
    exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(exported), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ops"]["FileConstant"] == 3
    assert summary["ops"]["Swish"] == 1
    assert summary["ops"]["GatherV2"] == 1
    assert summary["inputs"] == ["ids: DT_INT64[-1, -1]"]
    assert summary["outputs"] == ["output0: DT_FLOAT[-1, -1, 3]"]
    assert summary["weight_bytes"] == {
        "embedded": 0,
        "files": (40 + 12 + 3) * 4,
        "total": (40 + 12 + 3) * 4,
    }
    assert main(["inspect", str(exported / "export.air")]) == 0
    text = capsys.readouterr().out
    assert "Swish" in text
    assert "weight bytes: 220" in text


def test_run_with_random_inputs_saves_outputs(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", str(exported), "--seed", "3", "--dynamic-size", "4", "--int-high", "10"]
    assert main([*args, "--output-dir", str(tmp_path / "a")]) == 0
    assert "output0: float32 [4, 4, 3]" in capsys.readouterr().out
    assert main([*args, "--output-dir", str(tmp_path / "b")]) == 0
    first, second = (np.load(tmp_path / d / "output0.npy") for d in ("a", "b"))
    np.testing.assert_array_equal(first, second)  # same seed, same inputs, same outputs


def test_run_with_npy_inputs_matches_eager(exported: Path, tmp_path: Path) -> None:
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location(
        "tiny_factory_cli", exported.parent / "tiny_factory_cli.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, _ = module.build()
    ids = np.array([[1, 2, 3], [9, 8, 7]], dtype=np.int64)
    np.save(tmp_path / "ids.npy", ids)
    assert (
        main(
            [
                "run",
                str(exported),
                "--input",
                str(tmp_path / "ids.npy"),
                "--output-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    with torch.no_grad():
        expected = model(torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "output0.npy"), expected, rtol=1e-6)


def test_malformed_model_exits_1_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.air").write_bytes(b"\x0a\xff\xff\xff\xff")
    assert main(["inspect", str(tmp_path / "bad.air")]) == 1
    assert "not a valid GE model" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "nothing.air")]) == 1
    with pytest.raises(SystemExit):
        main(["export", "no-colon"])


def test_bad_command_line_arguments_give_one_line_errors(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit, match="cannot import 'no_such_module_xyz'"):
        main(["export", "no_such_module_xyz:build"])
    with pytest.raises(SystemExit, match="has no attribute 'nope'"):
        main(["export", "json:nope"])
    with pytest.raises(SystemExit) as info:
        main(["export", "json:dumps", "--embed-limit-bytes", "-1"])
    assert info.value.code == 2
    assert "must be >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["run", str(exported), "--int-high", "0"])
    assert info.value.code == 2
    not_npy = tmp_path / "ids.txt"
    not_npy.write_text("1 2 3")
    with pytest.raises(SystemExit, match=r"--input .*ids\.txt: not a \.npy"):
        main(["run", str(exported), "--input", str(not_npy)])
