"""The design card's rules for every distribution, checked on the repository itself."""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import subprocess
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


def test_vendored_copies_agree_and_drift_is_caught(tmp_path: Path) -> None:
    checker = _load_checker()
    assert checker.find_drift(ROOT) == []
    for places in checker.VENDORED.values():
        for place in places:
            copy = tmp_path / "packages" / place
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text((ROOT / "packages" / place).read_text())
    for places in checker.VENDORED.values():
        drifted = tmp_path / "packages" / places[-1]
        original = drifted.read_text()
        drifted.write_text(original + "\nEXTRA = 1\n")
        (problem,) = checker.find_drift(tmp_path)
        assert places[-1] in problem
        assert "--sync" in problem
        # --sync brings the copy back to the source's code, keeping its docstring and imports.
        assert checker.sync(tmp_path) == [drifted]
        assert drifted.read_text() == original
        assert checker.find_drift(tmp_path) == []


def test_a_missing_vendored_copy_is_reported(tmp_path: Path) -> None:
    checker = _load_checker()
    for places in checker.VENDORED.values():
        for place in places:
            copy = tmp_path / "packages" / place
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text((ROOT / "packages" / place).read_text())
    places = next(iter(checker.VENDORED.values()))
    (tmp_path / "packages" / places[1]).unlink()
    (problem,) = checker.find_drift(tmp_path)
    assert "is missing" in problem


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


def test_license_is_apache_and_every_wheel_carries_it() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    for package_dir in PACKAGE_DIRS:
        with (package_dir / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f)["project"]
        assert project["license"] == "Apache-2.0"
        # hatchling puts license-files into the wheel's .dist-info/licenses/; the files must
        # live inside the package directory, so each holds a copy of the root LICENSE.
        assert project["license-files"] == ["LICENSE"]
        assert (package_dir / "LICENSE").read_text() == text, f"{package_dir.name}/LICENSE differs"


def test_project_urls_point_at_one_repository() -> None:
    homes = set()
    for package_dir in PACKAGE_DIRS:
        with (package_dir / "pyproject.toml").open("rb") as f:
            urls = tomllib.load(f)["project"]["urls"]
        homes.add(urls["Homepage"])
        assert urls["Source"] == f"{urls['Homepage']}/tree/main/packages/{package_dir.name}"
        assert urls["Changelog"].endswith(f"/packages/{package_dir.name}/CHANGELOG.md")
        assert urls["Issues"] == f"{urls['Homepage']}/issues"
    assert len(homes) == 1, homes


def test_requires_python_matches_the_tested_versions() -> None:
    nox_text = (ROOT / "noxfile.py").read_text()
    tested = re.search(r'NPU_PYTHONS", "([^"]+)"', nox_text)
    assert tested is not None
    lowest = min(tested.group(1).split(","), key=lambda v: tuple(map(int, v.split("."))))
    for package_dir in PACKAGE_DIRS:
        with (package_dir / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f)["project"]
        assert project["requires-python"] == f">={lowest}", package_dir.name
    with (ROOT / "pyproject.toml").open("rb") as f:
        tools = tomllib.load(f)["tool"]
    assert tools["mypy"]["python_version"] == lowest
    assert tools["ruff"]["target-version"] == "py" + lowest.replace(".", "")


@pytest.mark.parametrize("package_dir", PACKAGE_DIRS, ids=lambda d: d.name)
def test_changelog_fragments_are_named_for_towncrier(package_dir: Path) -> None:
    with (package_dir / "pyproject.toml").open("rb") as f:
        towncrier = tomllib.load(f)["tool"]["towncrier"]
    assert towncrier["filename"] == "CHANGELOG.md"
    assert towncrier["start_string"].strip() in (package_dir / "CHANGELOG.md").read_text()
    types = {entry["directory"] for entry in towncrier["type"]}
    assert types == {"added", "changed", "deprecated", "removed", "fixed", "security"}
    fragments = package_dir / towncrier["directory"]
    assert fragments.is_dir()
    for fragment in fragments.iterdir():
        if fragment.name == ".gitkeep":
            continue
        # <issue>.<type>.md or +<slug>.<type>.md; towncrier skips anything else silently.
        match = re.fullmatch(r"(\d+|\+[\w.-]+?)\.(\w+)\.md", fragment.name)
        assert match, f"{fragment}: name it <issue>.<type>.md or +<slug>.<type>.md"
        assert match.group(2) in types, f"{fragment}: type must be one of {sorted(types)}"
        assert fragment.read_text().strip(), f"{fragment} is empty"


def test_the_documentation_cites_only_files_of_the_repository() -> None:
    # Contributor docs and published figures point at files a reader of this repository has:
    # no path that leaves it, and every repository path they name exists.
    for name in (
        "CONTRIBUTING.md",
        "benchmarks/RESULTS.md",
        "benchmarks/device_suite.sh",
        "docs/device-suite.md",
    ):
        text = (ROOT / name).read_text()
        assert "../" not in text, f"{name} cites a path outside the repository"
        for cited in re.findall(
            r"`((?:packages|benchmarks|integration_tests|docs)/[\w./-]+)`", text
        ):
            path = cited.split("::")[0].rstrip("/")
            if path.startswith("benchmarks/results") or "*" in path or "<" in path:
                continue  # where results are written, or a pattern
            assert (ROOT / path).exists(), f"{name}: {cited} does not exist"


def test_device_suite_takes_an_out_directory(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = str(ROOT / "benchmarks" / "device_suite.sh")
    shown = subprocess.run([bash, script, "--help"], capture_output=True, text=True, check=False)
    assert shown.returncode == 0
    assert "--out DIR" in shown.stdout
    wrong = subprocess.run([bash, script, "--bogus"], capture_output=True, text=True, check=False)
    assert wrong.returncode == 2
    assert "unknown argument" in wrong.stderr
    missing = subprocess.run([bash, script, "--out"], capture_output=True, text=True, check=False)
    assert missing.returncode == 2
    # --only picks steps by name, so the suite splits over runs; a wrong name stops before any.
    assert "--only STEP" in shown.stdout
    out = tmp_path / "out"
    typo = [bash, script, "--out", str(out), "--only", "device_tests,decode_stpe"]
    stopped = subprocess.run(typo, capture_output=True, text=True, check=False)
    assert stopped.returncode == 2
    assert "unknown step 'decode_stpe'" in stopped.stderr
    assert not out.exists()


def test_each_cli_runs_as_a_module() -> None:
    for package_dir in PACKAGE_DIRS:
        with (package_dir / "pyproject.toml").open("rb") as f:
            scripts = tomllib.load(f)["project"].get("scripts", {})
        src = package_dir / "src" / package_dir.name.replace("-", "_")
        if scripts:
            assert (src / "__main__.py").is_file(), f"python -m {src.name} does not work"


def test_docstring_examples_are_collected_and_none_is_skipped() -> None:
    # Every `>>>` example under src/ is a test: a skipped one is documentation nobody checks.
    skipped = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(ROOT.glob("packages/*/src/**/*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"doctest:.*\+SKIP", line)
    ]
    assert not skipped, f"skipped docstring examples: {skipped}"
    # The unit session of each package collects them from its src/ tree.
    noxfile = (ROOT / "noxfile.py").read_text()
    (tests_session,) = [
        node
        for node in ast.parse(noxfile).body
        if isinstance(node, ast.FunctionDef) and node.name == "tests"
    ]
    source = ast.get_source_segment(noxfile, tests_session) or ""
    assert "--doctest-modules" in source
    assert 'f"packages/{package}/src"' in source
