"""Check that sibling dependency ranges agree with the in-repo versions.

Fails when a package names a sibling with `==` (libraries use ranges), with no upper bound, or with
a range that the sibling's in-repo version does not satisfy. Run by `nox -s consistency`.
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


def main() -> int:
    """Print the problems (or a summary) and return the exit code."""
    problems = find_problems()
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        names = sorted(p.parent.name for p in ROOT.glob("packages/*/pyproject.toml"))
        print("sibling ranges consistent:", ", ".join(names))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
