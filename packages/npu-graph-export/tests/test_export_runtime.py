"""The numpy runtime: no torch import, clear input errors, and no crash on malformed files."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from npu_graph_export import (
    ExportConfig,
    ModelFormatError,
    NpuGraphExportError,
    RuntimeInputError,
    dynamo_export,
    runtime,
)


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)
        self.register_buffer("offset", torch.arange(3, dtype=torch.float32))

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.proj(x) + self.offset, dim=-1) * ids.float().unsqueeze(-1)


@pytest.fixture(scope="module")
def small_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    torch.manual_seed(0)
    model = Small().eval()
    path = tmp_path_factory.mktemp("small")
    dynamo_export(
        torch.randn(2, 4),
        torch.ones(2, dtype=torch.int64),
        model=model,
        export_path=path,
        dynamic=True,
    )
    return path, model


def test_runtime_and_cli_work_when_torch_cannot_be_imported(
    small_export: tuple[Path, torch.nn.Module], tmp_path: Path
) -> None:
    path, model = small_export
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    ids = np.arange(5, dtype=np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "ids.npy", ids)
    script = textwrap.dedent(
        f"""
        import sys

        class BlockTorch:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is blocked in this test")
                return None

        sys.meta_path.insert(0, BlockTorch())
        import numpy as np
        import npu_graph_export
        from npu_graph_export import runtime
        from npu_graph_export.cli import main

        model = runtime.load({str(path)!r})
        x = np.load({str(tmp_path / "x.npy")!r})
        out = model.run(x, np.load({str(tmp_path / "ids.npy")!r}))
        np.save({str(tmp_path / "out.npy")!r}, out[0])
        assert main(["inspect", {str(path)!r}]) == 0
        try:
            npu_graph_export.dynamo_export
        except ImportError:
            print("export needs torch")
        assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules), "torch leaked"
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout
    assert "export needs torch" in done.stdout
    assert "Softmax" in done.stdout or "SoftmaxV2" in done.stdout
    with torch.no_grad():
        expected = model(torch.from_numpy(x), torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=1e-5, atol=1e-6)


def test_inputs_are_checked(small_export: tuple[Path, torch.nn.Module]) -> None:
    model = runtime.load(small_export[0])
    assert [str(i) for i in model.inputs] == ["x: DT_FLOAT[-1, 4]", "ids: DT_INT64[-1]"]
    with pytest.raises(RuntimeInputError, match="takes 2 inputs"):
        model.run(np.zeros((2, 4), np.float32))
    with pytest.raises(RuntimeInputError, match="shape"):
        model.run(np.zeros((2, 5), np.float32), np.zeros(2, np.int64))
    with pytest.raises(RuntimeInputError, match="dtype"):
        model.run(np.zeros((2, 4), np.float32), np.zeros(2, np.float64))
    # Safe casts are accepted (float64 -> float32 is the same kind).
    (out,) = model.run(np.zeros((2, 4)), np.ones(2, np.int32))
    assert out.shape == (2, 3)
    assert out.dtype == np.float32


def test_dynamic_dimensions_the_model_ties_together_must_agree(
    small_export: tuple[Path, torch.nn.Module],
) -> None:
    model = runtime.load(small_export[0])
    # x and ids share the batch dimension: a mismatch is the caller's mistake, not the file's.
    with pytest.raises(RuntimeInputError, match=r"'ids' has size 2 in dimension 0 but input 'x'"):
        model.run(np.zeros((3, 4), np.float32), np.zeros(2, np.int64))
    (out,) = model.run(np.zeros((5, 4), np.float32), np.ones(5, np.int64))
    assert out.shape == (5, 3)


def test_missing_truncated_and_ambiguous_inputs_are_format_errors(
    small_export: tuple[Path, torch.nn.Module], tmp_path: Path
) -> None:
    data = (small_export[0] / "export.air").read_bytes()
    with pytest.raises(ModelFormatError, match="no such file"):
        runtime.load(tmp_path / "missing.air")
    (tmp_path / "cut.air").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFormatError, match="not a valid GE model"):
        runtime.load(tmp_path / "cut.air")
    (tmp_path / "empty.air").write_bytes(b"")
    with pytest.raises(ModelFormatError, match="no graph"):
        runtime.load(tmp_path / "empty.air")
    with pytest.raises(ModelFormatError, match=r"exactly one \.air"):
        runtime.load(tmp_path)
    with pytest.raises(ValueError, match="collectives"):
        runtime.load(small_export[0], collectives="maybe")


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(["flip", "insert", "delete", "truncate"]),
            st.integers(min_value=0),
            st.integers(min_value=0, max_value=255),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_fuzzed_air_files_fail_cleanly(
    small_export: tuple[Path, torch.nn.Module], tmp_path: Path, edits: list[tuple[str, int, int]]
) -> None:
    data = bytearray((small_export[0] / "export.air").read_bytes())
    for kind, position, byte in edits:
        at = position % max(len(data), 1)
        if kind == "flip" and data:
            data[at] ^= byte or 1
        elif kind == "insert":
            data.insert(at, byte)
        elif kind == "delete" and data:
            del data[at]
        elif kind == "truncate":
            del data[at:]
    target = tmp_path / "fuzz.air"
    target.write_bytes(bytes(data))
    # Either it still runs, or it fails with one of the two documented errors: anything else
    # (a crash, an IndexError, a hang) fails the test.
    error: NpuGraphExportError | None = None
    try:
        model = runtime.load(target)
        model.run(np.ones((3, 4), np.float32), np.ones(3, np.int64))
    except (ModelFormatError, RuntimeInputError) as caught:
        error = caught
    assert error is None or str(error)


def test_weights_in_files_load_after_the_directory_moves(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Small().eval()
    original = tmp_path / "orig"
    dynamo_export(
        torch.randn(2, 4),
        torch.ones(2, dtype=torch.int64),
        model=model,
        export_path=original,
        config=ExportConfig(embed_limit_bytes=0),
    )
    moved = tmp_path / "moved"
    original.rename(moved)
    x, ids = np.ones((2, 4), np.float32), np.arange(2)
    (out,) = runtime.load(moved).run(x, ids)
    with torch.no_grad():
        expected = model(torch.from_numpy(x), torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    (moved / "proj_weight").write_bytes(b"\0" * 4)
    with pytest.raises(ModelFormatError, match="proj_weight"):
        runtime.load(moved)


def test_rank_weight_file_wins_over_a_stale_file_of_the_same_name(tmp_path: Path) -> None:
    # Layout of a multi-rank export (rank_0/<weight>) that was moved, in a directory where an
    # earlier single-rank export left a weight file of the same name and size beside the .air.
    torch.manual_seed(0)
    model = Small().eval()
    source = tmp_path / "source"
    dynamo_export(
        torch.randn(2, 4),
        torch.ones(2, dtype=torch.int64),
        model=model,
        export_path=source,
        config=ExportConfig(embed_limit_bytes=0),
    )
    moved = tmp_path / "moved"
    (moved / "rank_0").mkdir(parents=True)
    air = runtime.load(source).graph
    for op in air.op:
        if op.type == "FileConstant":
            name = Path(op.attr["file_path"].s.decode()).name
            (moved / "rank_0" / name).write_bytes((source / name).read_bytes())
            (moved / name).write_bytes(b"\0" * (source / name).stat().st_size)  # stale
            op.attr["file_path"].s = f"gone/rank_0/{name}".encode()
    from npu_graph_export._proto import ge_ir_pb2 as ge

    (moved / "export0.air").write_bytes(ge.ModelDef(name="m", graph=[air]).SerializeToString())
    x, ids = np.ones((2, 4), np.float32), np.arange(2)
    (out,) = runtime.load(moved, rank=0).run(x, ids)
    with torch.no_grad():
        expected = model(torch.from_numpy(x), torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_rank_picks_its_own_air_among_twelve(
    small_export: tuple[Path, torch.nn.Module], tmp_path: Path
) -> None:
    air = next(small_export[0].glob("*.air")).read_bytes()
    for rank in range(12):
        (tmp_path / f"mp_rank{rank}.air").write_bytes(air)
    assert runtime.load(tmp_path, rank=1).path.name == "mp_rank1.air"
    assert runtime.load(tmp_path, rank=11).path.name == "mp_rank11.air"
    assert runtime.load(tmp_path, rank=0).path.name == "mp_rank0.air"


def test_weights_beside_the_air_win_over_a_newer_export_at_the_recorded_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Export to the relative "out", keep a copy, re-export another checkpoint to "out": loading
    # the copy must use the copy's weights, not those the recorded path "out/..." now names.
    monkeypatch.chdir(tmp_path)
    x, ids = torch.randn(2, 4), torch.ones(2, dtype=torch.int64)
    limit = ExportConfig(embed_limit_bytes=0)
    torch.manual_seed(0)
    first = Small().eval()
    dynamo_export(x, ids, model=first, export_path="out", config=limit)
    import shutil

    shutil.copytree("out", "kept")
    torch.manual_seed(1)
    dynamo_export(x, ids, model=Small().eval(), export_path="out", config=limit)
    (got,) = runtime.load(tmp_path / "kept").run(x.numpy(), ids.numpy())
    with torch.no_grad():
        np.testing.assert_allclose(got, first(x, ids).numpy(), rtol=1e-6)


def test_token_ids_past_the_vocabulary_are_an_input_error(tmp_path: Path) -> None:
    model = torch.nn.Embedding(10, 4)
    dynamo_export(torch.zeros(2, 3, dtype=torch.int64), model=model, export_path=tmp_path)
    loaded = runtime.load(tmp_path)
    with pytest.raises(RuntimeInputError, match=r"out of range.*span 0\.\.12.*vocabulary"):
        loaded.run(np.array([[0, 12, 3], [1, 2, 3]]))
    (out,) = loaded.run(np.array([[0, 9, 3], [1, 2, 3]]))
    np.testing.assert_array_equal(out[0, 1], model.weight.detach().numpy()[9])


def test_kernel_table_is_assembled_once_without_duplicates() -> None:
    # The families register into one table; a second kernel for one op type fails at import
    # instead of silently replacing the first.
    from npu_graph_export._opdefs import OPS
    from npu_graph_export.runtime._kernels import KERNELS
    from npu_graph_export.runtime._kernels._base import register

    assert set(KERNELS) <= set(OPS)
    add = KERNELS["Add"]
    with pytest.raises(RuntimeError, match=r"two reference kernels.*'Add'"):
        register("Add", add)
    assert KERNELS["Add"] is add
