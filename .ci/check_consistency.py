"""Check that sibling dependency ranges agree with the in-repo versions, and vendored copies agree.

Fails when a package names a sibling with `==` (libraries use ranges), with no upper bound, or with
a range that the sibling's in-repo version does not satisfy; and when the copies of a module that
each package carries (the distributions never import each other's private modules) drift apart in
their code. Run by `nox -s consistency`.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _version(package_dir: Path) -> Version:
    with (package_dir / "pyproject.toml").open("rb") as f:
        path = tomllib.load(f)["tool"]["hatch"]["version"]["path"]
    text = (package_dir / path).read_text()
    match = re.search(r'__version__\s*=\s*"([^"]+)"', text)
    if match is None:
        raise SystemExit(f"{package_dir / path}: no __version__ string")
    return Version(match.group(1))


def find_problems(root: Path = ROOT) -> list[str]:
    """Return one line per sibling range that is pinned, unbounded or excludes its sibling."""
    dirs = {p.parent.name: p.parent for p in sorted(root.glob("packages/*/pyproject.toml"))}
    versions = {name: _version(d) for name, d in dirs.items()}
    problems: list[str] = []
    for name, d in dirs.items():
        with (d / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f)["project"]
        requirements = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            requirements += extra
        for line in requirements:
            req = Requirement(line)
            if req.name not in versions:
                continue
            ops = {spec.operator for spec in req.specifier}
            if "==" in ops or "===" in ops:
                problems.append(f"{name}: `{line}` pins a sibling with ==; use a range")
            if not ops & {"<", "<=", "~="}:
                problems.append(f"{name}: `{line}` has no upper bound; use >=X.Y,<X.(Y+1)")
            if not req.specifier.contains(versions[req.name], prereleases=True):
                problems.append(
                    f"{name}: `{line}` excludes the in-repo {req.name} {versions[req.name]}"
                )
    return problems


#: Modules each listed package carries a copy of: the code after the imports must be identical
#: (the docstring and the package's own imports may differ).
VENDORED = {
    "_confine.py": (
        "npu-graph-export/src/npu_graph_export",
        "npu-static-kernel/src/npu_static_kernel",
    ),
}


def _code(path: Path) -> list[str]:
    """The module's lines after its docstring, without imports of the package itself."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("from __future__"))
    return [line for line in lines[start:] if not line.startswith("from npu_")]


def find_drift(root: Path = ROOT) -> list[str]:
    """Return one line per vendored module whose copies differ in their code."""
    problems: list[str] = []
    for module, places in VENDORED.items():
        first, *others = [root / "packages" / place / module for place in places]
        for other in others:
            if _code(first) != _code(other):
                problems.append(
                    f"{other.relative_to(root)} differs from {first.relative_to(root)}: "
                    "change both copies the same way"
                )
    return problems


def main() -> int:
    """Print the problems (or a summary) and return the exit code."""
    problems = find_problems() + find_drift()
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        names = sorted(p.parent.name for p in ROOT.glob("packages/*/pyproject.toml"))
        print("sibling ranges consistent:", ", ".join(names))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
