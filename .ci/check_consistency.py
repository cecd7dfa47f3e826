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


#: Modules kept as one source vendored into several packages (the distributions never import each
#: other's private modules; docs/architecture.md says why this beats a sixth distribution). The
#: first path is the source of truth; every other path is a copy whose code must be identical to
#: the source's: the docstring and the package's own imports (``from npu_...``) may differ.
#: ``--sync`` rewrites the copies from the source.
VENDORED: dict[str, tuple[str, ...]] = {
    "confine": (
        "npu-static-kernel/src/npu_static_kernel/_confine.py",
        "npu-graph-export/src/npu_graph_export/_confine.py",
    ),
    "cli_common": (
        "npu-compile/src/npu_compile/_cli/common.py",
        "npu-graph-export/src/npu_graph_export/_cli_common.py",
        "npu-static-kernel/src/npu_static_kernel/_cli_common.py",
    ),
    "accel": (
        "npu-compile/src/npu_compile/_accel.py",
        "npu-mempool/src/npu_mempool/_accel.py",
        "npu-static-kernel/src/npu_static_kernel/_accel.py",
        "npu-streams/src/npu_streams/_accel.py",
    ),
    "counting": (
        "npu-compile/src/npu_compile/_counting.py",
        "npu-mempool/src/npu_mempool/_counting.py",
        "npu-static-kernel/src/npu_static_kernel/_counting.py",
    ),
}


def _own_import(line: str) -> bool:
    return line.startswith("from npu_")


def _code(path: Path) -> list[str]:
    """The module's lines after its docstring, without imports of the package itself."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("from __future__"))
    return [line for line in lines[start:] if not _own_import(line)]


def find_drift(root: Path = ROOT) -> list[str]:
    """Return one line per vendored copy whose code differs from its source."""
    problems: list[str] = []
    for places in VENDORED.values():
        source, *copies = [root / "packages" / place for place in places]
        for copy in copies:
            if not copy.is_file():
                problems.append(f"{copy.relative_to(root)} is missing: copy {source.name} there")
            elif _code(source) != _code(copy):
                problems.append(
                    f"{copy.relative_to(root)} differs from its source "
                    f"{source.relative_to(root)}: change the source and run "
                    "`python .ci/check_consistency.py --sync`"
                )
    return problems


def synced(source: str, copy: str) -> str:
    """``copy`` with the code of ``source``: its own docstring and own imports kept in place."""
    source_lines = source.splitlines()
    copy_lines = copy.splitlines()
    begin = next(i for i, line in enumerate(copy_lines) if line.startswith("from __future__"))
    start = next(i for i, line in enumerate(source_lines) if line.startswith("from __future__"))
    own = [line for line in copy_lines if _own_import(line)]
    body = source_lines[start:]
    slots = [i for i, line in enumerate(body) if _own_import(line)]
    if len(slots) != len(own):
        # The copy's own imports replace the source's one for one; any other shape needs a person.
        raise SystemExit(
            f"cannot sync: the source has {len(slots)} package import line(s), the copy "
            f"{len(own)}; edit the copy by hand"
        )
    for slot, line in zip(slots, own, strict=True):
        body[slot] = line
    return "\n".join(copy_lines[:begin] + body) + "\n"


def sync(root: Path = ROOT) -> list[Path]:
    """Rewrite every vendored copy from its source; return the copies that changed."""
    changed: list[Path] = []
    for places in VENDORED.values():
        source, *copies = [root / "packages" / place for place in places]
        for copy in copies:
            if not copy.is_file():
                continue  # reported by find_drift: a new copy needs its own imports written once
            text = synced(source.read_text(), copy.read_text())
            if text != copy.read_text():
                copy.write_text(text)
                changed.append(copy)
    return changed


def main() -> int:
    """Print the problems (or a summary) and return the exit code; ``--sync`` updates copies."""
    if "--sync" in sys.argv[1:]:
        for path in sync():
            print(f"synced {path.relative_to(ROOT)}")
    problems = find_problems() + find_drift()
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        names = sorted(p.parent.name for p in ROOT.glob("packages/*/pyproject.toml"))
        print("sibling ranges consistent:", ", ".join(names))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
