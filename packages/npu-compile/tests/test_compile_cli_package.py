"""What the command line and ``diagnose`` need ships in the package: nothing from the repository.

An installed wheel holds ``src/npu_compile`` only; ``examples/`` and ``benchmarks/`` stay in the
repository. These tests run the commands in a fresh interpreter from an empty directory and check
that no module outside the installed distributions was loaded.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import npu_compile
import pytest

# Run in the child: the commands, then the files of every module it loaded.
_CHILD = textwrap.dedent(
    """
    import json, sys
    from npu_compile._tools import bench as _bench
    from npu_compile.cli import main

    # The MLP overhead benchmark takes seconds at its defaults; two rounds show it runs.
    real = _bench.mlp_overhead_bench
    _bench.mlp_overhead_bench = lambda **kwargs: real(number=2, repeat=2, **kwargs)
    small = ["--device", "cpu", "--quiet", "--layers", "1", "--dim", "32"]
    codes = [
        main(["demo", "--tokens", "3", *small]),
        main(["bench", "--steps", "1", "--device", "cpu", "--quiet", "--out", sys.argv[1]]),
        main(["diagnose", "--steps", "1", "--max-seconds", "2", *small]),
    ]
    files = [getattr(m, "__file__", None) or "" for m in list(sys.modules.values())]
    print(json.dumps({"codes": codes, "files": files}))
    """
)


def test_demo_bench_and_diagnose_run_from_the_package_alone(tmp_path: Path) -> None:
    repository = Path(__file__).resolve().parents[3]
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(out)],
        cwd=tmp_path,  # an empty directory: what a user of the wheel has
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["codes"] == [0, 0, 0]
    assert json.loads((out / "decode_step_cpu.json").read_text())["reports"]
    outside = [
        name
        for name in report["files"]
        for folder in ("examples", "benchmarks", "integration_tests")
        if Path(name).is_relative_to(repository / folder)
    ]
    assert outside == []


def test_diagnose_is_a_public_module_and_the_root_keeps_its_names() -> None:
    import npu_compile.diagnosis as module
    from npu_compile.diagnosis import (
        DEVICE_BOUND,
        HOST_BOUND,
        TOO_NOISY,
        DiagnoseReport,
        PhaseTiming,
        diagnose,
    )

    # The package attribute is the function, as before the module existed, and no module of the
    # same name hides behind it (``import npu_compile.diagnose as m`` would give the function).
    assert npu_compile.diagnose is diagnose
    assert module is sys.modules["npu_compile.diagnosis"]
    assert "npu_compile.diagnose" not in sys.modules
    assert callable(npu_compile.diagnose)
    assert npu_compile.DiagnoseReport is DiagnoseReport
    assert npu_compile.PhaseTiming is PhaseTiming
    assert {"diagnose", "DiagnoseReport", "PhaseTiming"} <= set(npu_compile.__all__)
    assert set(module.__all__) == {
        "diagnose",
        "DiagnoseReport",
        "PhaseTiming",
        "HOST_BOUND",
        "DEVICE_BOUND",
        "TOO_NOISY",
    }
    assert (HOST_BOUND, DEVICE_BOUND, TOO_NOISY) == ("Host Bound", "Device Bound", "Too Noisy")
    for name in module.__all__:
        value = getattr(module, name)
        if callable(value):
            assert value.__module__ == "npu_compile.diagnosis", name
            assert value.__doc__, name


@pytest.mark.parametrize("statement", ["import npu_compile", "from npu_compile import diagnose"])
def test_importing_the_package_leaves_the_command_line_unloaded(statement: str) -> None:
    code = (
        f"{statement}\nimport sys\n"
        "print(sorted(m for m in sys.modules if m.startswith(('npu_compile._cli', "
        "'npu_compile.cli', 'npu_compile._tools.bench', 'npu_compile._tools.demo'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.strip() == "[]"
