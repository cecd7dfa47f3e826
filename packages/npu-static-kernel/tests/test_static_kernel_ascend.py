"""AscendBuilder against a fake CANN ``op_compiler`` put on PATH by the test."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import pytest
import torch
from npu_static_kernel import (
    ArtifactCache,
    AscendBuilder,
    BuildError,
    StaticKernelCompiler,
    StaticKernelFallbackWarning,
    compute_key,
)

FAKE_OP_COMPILER = f"""#!{sys.executable}
import datetime, json, os, pathlib, sys
args = sys.argv[1:]
with open(os.environ["FAKE_OPC_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if os.environ.get("FAKE_OPC_FAIL"):
    print("E10001: compile failed for MatMulV2", file=sys.stderr)
    sys.exit(3)
opts = dict(zip(args[::2], args[1::2]))
files = sorted(pathlib.Path(opts["-p"]).glob("*.json"))
kernels = [json.loads(p.read_text())["op_type"] for p in files]
stamp = datetime.datetime.now().strftime("%Y%m%d%H%M%S%f")
run = pathlib.Path(opts["-o"]) / f"static_kernel_{{stamp}}.run"
target = f'"$ASCEND_HOME_PATH/../vendor/opp/static_kernel/ai_core/static_kernel_{{stamp}}"'
run.write_text(
    "#!/bin/sh\\nset -e\\n"
    f"echo 'install {{opts['-v']}} {{' '.join(kernels)}}' >> \\"$FAKE_INSTALL_LOG\\"\\n"
    f"mkdir -p {{target}}\\n"
    f"echo 'echo uninstall >> \\"$FAKE_INSTALL_LOG\\"' > {{target}}/uninstall.sh\\n"
)
run.chmod(0o755)
"""


def graph_fn(buf: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
    hidden = torch.ops.aten.mm.default(x, w)
    torch.ops.aten.copy_.default(buf, torch.ops.aten.add.Tensor(buf, hidden))
    return (torch.ops.aten.relu.default(hidden),)


GM = torch.fx.symbolic_trace(graph_fn)


def make_args() -> list[torch.Tensor]:
    return [torch.zeros(2, 4), torch.ones(2, 3), torch.ones(3, 4)]


@pytest.fixture
def fake_cann(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "op_compiler"
    tool.write_text(FAKE_OP_COMPILER)
    tool.chmod(0o755)
    (tmp_path / "ascend" / "latest").mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_OPC_LOG", str(tmp_path / "op_compiler.log"))
    monkeypatch.setenv("FAKE_INSTALL_LOG", str(tmp_path / "install.log"))
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "ascend" / "latest"))
    monkeypatch.setenv("ASCEND_GLOBAL_LOG_LEVEL", "1")
    return tmp_path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_builds_with_op_compiler_installs_the_run_and_returns_the_graph(fake_cann: Path) -> None:
    build_dir = fake_cann / "build"
    compiler = StaticKernelCompiler(
        build_dir, builder=AscendBuilder("Ascend910B3", jobs=2), strict=True
    )
    args = make_args()
    fn = compiler.compile_static(GM, args)
    assert fn == GM.forward  # on the NPU, aclnn picks the installed kernels up by itself
    stats = compiler.last_statistics
    assert stats is not None
    (argv,) = [json.loads(line) for line in _lines(fake_cann / "op_compiler.log")]
    assert argv == [
        "-p", str(stats.selected_dir), "-v", "Ascend910B3", "-j", "2",
        "-o", str(stats.output_dir), "-l", "info",
    ]  # fmt: skip
    runs = list(stats.output_dir.glob("static_kernel_*.run"))
    assert len(runs) == 1  # the seed's layout: the .run sits in <timestamp>_<pid>_outputs
    (install,) = _lines(fake_cann / "install.log")
    assert install.startswith("install Ascend910B3 ")
    assert "MatMulV2" in install.split()
    key = compute_key(GM, args, AscendBuilder("Ascend910B3", jobs=2))
    entry = ArtifactCache(build_dir).lookup(key)
    assert entry is not None
    assert (entry / runs[0].name).is_file()
    assert (compiler.counters.builds, compiler.counters.installs, compiler.counters.loads) == (
        1,
        1,
        1,
    )
    out_args, ref_args = make_args(), make_args()
    torch.testing.assert_close(fn(*out_args), GM(*ref_args))
    torch.testing.assert_close(out_args[0], ref_args[0])


def test_cache_hit_skips_op_compiler_and_the_process_installs_once(fake_cann: Path) -> None:
    build_dir = fake_cann / "build"
    StaticKernelCompiler(build_dir, builder=AscendBuilder("Ascend910B3")).compile_static(
        GM, make_args()
    )
    again = StaticKernelCompiler(build_dir, builder=AscendBuilder("Ascend910B3"))
    again.compile_static(GM, make_args())
    assert (again.counters.builds, again.counters.hits, again.counters.loads) == (0, 1, 1)
    assert len(_lines(fake_cann / "op_compiler.log")) == 1
    assert len(_lines(fake_cann / "install.log")) == 1


def test_clean_runs_the_uninstall_script(fake_cann: Path) -> None:
    build_dir = fake_cann / "build"
    StaticKernelCompiler(build_dir, builder=AscendBuilder("Ascend910B3")).compile_static(
        GM, make_args()
    )
    assert ArtifactCache(build_dir).clean() == 1
    assert _lines(fake_cann / "install.log")[-1] == "uninstall"
    assert ArtifactCache(build_dir).entries() == []


def test_blacklisted_ops_stay_out_of_the_compile_list(fake_cann: Path) -> None:
    compiler = StaticKernelCompiler(
        fake_cann / "build", builder=AscendBuilder("Ascend910B3", blacklist=["MatMul"])
    )
    compiler.compile_static(GM, make_args())
    stats = compiler.last_statistics
    assert stats is not None
    assert not any(name.startswith("MatMulV2") for name in stats.selected)
    assert any(p.name.startswith("MatMulV2") for p in stats.debug_dir.iterdir())
    (install,) = _lines(fake_cann / "install.log")
    assert "MatMulV2" not in install
    assert "Add" in install


def test_op_compiler_failure_leaves_no_artifact(
    fake_cann: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_OPC_FAIL", "1")
    build_dir = fake_cann / "build"
    compiler = StaticKernelCompiler(build_dir, builder=AscendBuilder("Ascend910B3"), strict=True)
    with pytest.raises(BuildError, match=r"exit code 3: E10001: compile failed"):
        compiler.compile_static(GM, make_args())
    cache = ArtifactCache(build_dir)
    assert cache.entries() == []
    assert [p.name for p in (cache.root / "entries").iterdir()] == []
    assert _lines(fake_cann / "install.log") == []


def test_missing_op_compiler_says_cann_is_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    strict = StaticKernelCompiler(tmp_path, builder=AscendBuilder("Ascend910B3"), strict=True)
    with pytest.raises(BuildError, match=r"op_compiler` was not found on PATH.*CANN") as info:
        strict.compile_static(GM, make_args())
    assert isinstance(info.value, RuntimeError)
    assert info.value.code == "build"

    lenient = StaticKernelCompiler(tmp_path, builder=AscendBuilder("Ascend910B3"))
    with (
        caplog.at_level(logging.WARNING, logger="npu_static_kernel"),
        pytest.warns(StaticKernelFallbackWarning, match="op_compiler` was not found"),
    ):
        fn = lenient.compile_static(GM, make_args())
    assert fn == GM.forward
    assert lenient.counters.fallbacks == 1
    assert lenient.counters.builds == 0
    assert "without static kernels" in caplog.text
    assert "CANN" in caplog.text


def test_unknown_soc_asks_for_soc_version(tmp_path: Path) -> None:
    # No torch_npu in this environment, so the SoC cannot be asked from the device.
    with pytest.raises(BuildError, match=r"soc_version="):
        AscendBuilder().compute_hash()
    compiler = StaticKernelCompiler(tmp_path, builder=AscendBuilder(), strict=True)
    with pytest.raises(BuildError, match=r"soc_version="):
        compiler.compile_static(GM, make_args())


def test_op_compiler_writing_no_run_is_a_build_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "op_compiler"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    build_dir = tmp_path / "build"
    compiler = StaticKernelCompiler(build_dir, builder=AscendBuilder("Ascend910B3"), strict=True)
    with pytest.raises(BuildError, match=r"wrote no static_kernel_\*\.run"):
        compiler.compile_static(GM, make_args())
    assert ArtifactCache(build_dir).entries() == []
