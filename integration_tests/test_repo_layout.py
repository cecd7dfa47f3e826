"""The design card's rules for every distribution, checked on the repository itself."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = sorted(p.parent for p in ROOT.glob("packages/*/pyproject.toml"))


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_consistency", ROOT / ".ci/check_consistency.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_five_distributions_exist() -> None:
    assert [d.name for d in PACKAGE_DIRS] == [
        "npu-compile",
        "npu-graph-export",
        "npu-mempool",
        "npu-static-kernel",
        "npu-streams",
    ]


@pytest.mark.parametrize("package_dir", PACKAGE_DIRS, ids=lambda d: d.name)
def test_package_skeleton(package_dir: Path) -> None:
    with (package_dir / "pyproject.toml").open("rb") as f:
        meta = tomllib.load(f)
    assert meta["build-system"]["build-backend"] == "hatchling.build"
    assert meta["project"]["dynamic"] == ["version"]
    src = package_dir / "src" / package_dir.name.replace("-", "_")
    assert meta["tool"]["hatch"]["version"]["path"] == f"src/{src.name}/_version.py"
    for name in ("__init__.py", "_version.py", "py.typed", "errors.py"):
        assert (src / name).is_file(), f"{src / name} is missing"
    for name in ("README.md", "CHANGELOG.md"):
        assert (package_dir / name).is_file()
    assert list((package_dir / "tests").glob("test_*.py")), "every package ships tests"
    tree = ast.parse((src / "__init__.py").read_text())
    exported = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "__all__" for t in node.targets)
    ]
    assert exported, f"{src}/__init__.py defines no __all__"


def test_sibling_ranges_are_consistent() -> None:
    assert _load_checker().find_problems(ROOT) == []


def test_consistency_check_rejects_pins_and_excluding_ranges(tmp_path: Path) -> None:
    for package_dir in PACKAGE_DIRS:
        target = tmp_path / "packages" / package_dir.name
        (target / "src").mkdir(parents=True)
        shutil.copy(package_dir / "pyproject.toml", target / "pyproject.toml")
        shutil.copytree(
            package_dir / "src" / package_dir.name.replace("-", "_"),
            target / "src" / package_dir.name.replace("-", "_"),
        )
    meta = tmp_path / "packages" / "npu-compile" / "pyproject.toml"
    text = meta.read_text()
    text = text.replace('"npu-streams>=0.1,<0.2"', '"npu-streams==0.1.0"')
    text = text.replace('"npu-mempool>=0.1,<0.2"', '"npu-mempool>=0.2,<0.3"')
    meta.write_text(text)
    problems = _load_checker().find_problems(tmp_path)
    assert any("npu-streams==0.1.0" in p and "==" in p for p in problems)
    assert any("excludes the in-repo npu-mempool 0.1.0" in p for p in problems)


def test_torch_npu_is_only_an_optional_extra() -> None:
    for package_dir in PACKAGE_DIRS:
        with (package_dir / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f)["project"]
        assert not any(dep.startswith("torch-npu") for dep in project["dependencies"])
    with (ROOT / "packages/npu-compile/pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    assert project["optional-dependencies"]["npu"][0].startswith("torch-npu")
