"""Which code a run measured: the commit, a hash of uncommitted changes, a hash of the whole tree.

A device machine often gets a copy of the working tree without ``.git`` (tracked files and the
untracked ones git does not ignore). Its results must still name the code, so the identity rests
on the files themselves:

- ``tree_sha256``: SHA-256 over the sorted ``path NUL blob-id`` lines of every file git would
  list (tracked, and untracked but not ignored), where ``blob-id`` is git's own object id of the
  file's content (SHA-1 of ``blob <size>\\0<content>``). With ``.git`` the files are the ones
  ``git ls-files`` lists; without it, a walk of the tree that skips what the ``.gitignore`` files
  ignore. Both give the same hash for the same files, and a commit's hash is read from its tree
  (``git ls-tree``) without checking it out, so a copy's hash can be traced back to a commit.
- ``commit``: ``git rev-parse HEAD``, or ``None`` without a repository at the tree's root;
- ``uncommitted``: the files that differ from the commit, and a SHA-256 over each one's
  ``path NUL commit-blob NUL tree-blob`` line (``None`` without a repository).

    python benchmarks/_code.py [--root DIR] [--find SUMMARY_OR_TREE_SHA256]

prints the identity of the tree at ``--root`` (default: this checkout); ``--find`` names the
commit (among every branch's last 1000) whose tree hash is the one in a ``summary.json`` (or the
one given), and says whether the working tree has it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: How many commits ``--find`` looks through (of every branch, newest first).
FIND_DEPTH = 1000
#: Paths listed under ``uncommitted`` (the count and the hash cover them all).
LISTED = 50


def blob_id(data: bytes) -> str:
    """Git's object id of a file with ``data`` as content (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _content(path: Path) -> bytes:
    # Git stores a symbolic link as its target, not what it points at.
    return os.fsencode(os.readlink(path)) if path.is_symlink() else path.read_bytes()


def tree_sha256(blobs: dict[str, str]) -> str:
    """SHA-256 of ``path NUL blob-id`` lines, sorted by path."""
    digest = hashlib.sha256()
    for path in sorted(blobs):
        digest.update(f"{path}\0{blobs[path]}\n".encode())
    return digest.hexdigest()


# -- git, where the tree's root is a repository's -------------------------------------------------


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git on this machine
    return done.stdout.decode("utf-8", "surrogateescape") if done.returncode == 0 else None


def is_repository(root: Path) -> bool:
    """Whether ``root`` is the top of a git work tree (not a folder inside another repository)."""
    top = _git(root, "rev-parse", "--show-toplevel")
    return top is not None and Path(top.strip()).resolve() == root.resolve()


def _git_files(root: Path) -> list[str]:
    listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if listed is None:
        raise OSError(f"git ls-files failed in {root}")
    # A tracked file deleted in the working tree is listed too: it is not part of the tree.
    paths = {p for p in listed.split("\0") if p}
    return sorted(p for p in paths if (root / p).is_symlink() or (root / p).is_file())


def commit_blobs(root: Path, commit: str) -> dict[str, str]:
    """Path -> blob id of every file in ``commit`` (submodules left out)."""
    listed = _git(root, "ls-tree", "-r", "-z", "--full-tree", commit)
    if listed is None:
        raise OSError(f"git ls-tree failed for {commit} in {root}")
    blobs = {}
    for entry in filter(None, listed.split("\0")):
        meta, _, path = entry.partition("\t")
        _mode, kind, sha = meta.split()
        if kind == "blob":
            blobs[path] = sha
    return blobs


# -- without git: a walk that skips what .gitignore files ignore ---------------------------------


def _pattern(glob: str) -> re.Pattern[str]:
    """A ``.gitignore`` glob as a regular expression over ``/``-separated relative paths."""
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("/.*")
            i += 3
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and "]" in glob[i + 2 :]:
            end = glob.index("]", i + 2)
            body = glob[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
        elif glob[i] == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


class _Rule:
    """One line of a ``.gitignore`` in folder ``base`` (``""``: the root)."""

    def __init__(self, base: str, line: str) -> None:
        self.base = base
        self.negated = line.startswith("!")
        line = line[1:] if self.negated else line
        self.directory_only = line.endswith("/")
        line = line.rstrip("/")
        # A slash at the start or in the middle anchors the pattern to the .gitignore's folder.
        self.anchored = "/" in line
        self.regex = _pattern(line.lstrip("/"))

    def matches(self, path: str, is_dir: bool) -> bool:
        if self.directory_only and not is_dir:
            return False
        if self.base:
            if not path.startswith(self.base + "/"):
                return False
            path = path[len(self.base) + 1 :]
        target = path if self.anchored else path.rsplit("/", 1)[-1]
        return self.regex.match(target) is not None


def _rules(folder: Path, base: str) -> list[_Rule]:
    ignore = folder / ".gitignore"
    if not ignore.is_file():
        return []
    rules = []
    for raw in ignore.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.rstrip()
        if line and not line.startswith("#"):
            rules.append(_Rule(base, line[1:] if line.startswith("\\#") else line))
    return rules


def _ignored(rules: Iterable[_Rule], path: str, is_dir: bool) -> bool:
    ignored = False
    for rule in rules:  # the last matching line decides, as in git
        if rule.matches(path, is_dir):
            ignored = not rule.negated
    return ignored


def walked_files(root: Path) -> list[str]:
    """The files git would list in ``root``, read from the ``.gitignore`` files alone."""
    found: list[str] = []

    def walk(folder: Path, base: str, rules: list[_Rule]) -> None:
        rules = rules + _rules(folder, base)
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                path = f"{base}/{entry.name}" if base else entry.name
                if entry.name == ".git":
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                # Git does not look into an ignored folder: nothing in it can be listed again.
                if _ignored(rules, path, is_dir):
                    continue
                if is_dir:
                    walk(Path(entry.path), path, rules)
                elif entry.is_file(follow_symlinks=False) or entry.is_symlink():
                    found.append(path)

    walk(root, "", [])
    return found


# -- the identity ---------------------------------------------------------------------------------


def identity(root: Path) -> dict[str, Any]:
    """The code at ``root``: commit, uncommitted changes, tree hash (see the module docstring)."""
    root = root.resolve()
    repository = is_repository(root)
    paths = _git_files(root) if repository else walked_files(root)
    blobs = {path: blob_id(_content(root / path)) for path in paths}
    result: dict[str, Any] = {
        "commit": None,
        "uncommitted": None,
        "tree_sha256": tree_sha256(blobs),
        "files": len(blobs),
        "files_from": "git ls-files" if repository else "the tree, less what .gitignore ignores",
    }
    commit = _git(root, "rev-parse", "--verify", "HEAD") if repository else None
    if commit is None:
        why = "no git repository at the tree's root" if not repository else "no commit yet"
        result["note"] = (
            f"{why}: tree_sha256 names the code; `python benchmarks/_code.py --find "
            "summary.json` in a checkout with history names the commit that has it"
        )
        return result
    result["commit"] = commit.strip()
    committed = commit_blobs(root, result["commit"])
    changed = sorted(p for p in committed.keys() | blobs.keys() if committed.get(p) != blobs.get(p))
    digest = hashlib.sha256()
    for path in changed:
        digest.update(f"{path}\0{committed.get(path, '-')}\0{blobs.get(path, '-')}\n".encode())
    result["uncommitted"] = {
        "files": len(changed),
        "sha256": digest.hexdigest() if changed else None,
        "paths": [
            ("added " if p not in committed else "deleted " if p not in blobs else "") + p
            for p in changed[:LISTED]
        ],
    }
    return result


def describe(code: dict[str, Any]) -> str:
    """One line for a log."""
    tree = f"tree sha256 {code['tree_sha256'][:16]} ({code['files']} files)"
    if code.get("commit") is None:
        return f"code: no commit known ({code.get('note', '')}); {tree}"
    changes = code["uncommitted"]
    state = (
        f"+ {changes['files']} uncommitted file(s), sha256 {changes['sha256'][:16]}"
        if changes["files"]
        else "no uncommitted changes"
    )
    return f"code: commit {code['commit'][:12]}, {state}; {tree}"


def find(root: Path, wanted: str) -> list[str]:
    """Commits (of the last ``FIND_DEPTH`` of every branch) whose files hash to ``wanted``."""
    listed = _git(root, "rev-list", f"--max-count={FIND_DEPTH}", "--all")
    if listed is None:
        raise OSError(f"{root} has no git history to search")
    return [c for c in listed.split() if tree_sha256(commit_blobs(root, c)) == wanted]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the tree (default: this checkout)")
    parser.add_argument(
        "--find", metavar="SUMMARY_OR_SHA256", help="a summary.json, or a tree sha256, to trace"
    )
    args = parser.parse_args()
    try:
        if args.find is None:
            print(json.dumps(identity(args.root), indent=2))
            return 0
        wanted = args.find
        if Path(wanted).is_file():
            summary = json.loads(Path(wanted).read_text(encoding="utf-8"))
            wanted = (summary.get("code") or {}).get("tree_sha256")
            if not wanted:
                print(f"error: {args.find} has no code.tree_sha256", file=sys.stderr)
                return 2
        here = identity(args.root)["tree_sha256"] == wanted
        commits = find(args.root.resolve(), wanted)
    except (OSError, json.JSONDecodeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"tree sha256 {wanted}")
    print(f"the working tree at {args.root}: {'has it' if here else 'differs'}")
    print(f"commits with it: {', '.join(commits) or 'none'}")
    return 0 if here or commits else 1


if __name__ == "__main__":
    sys.exit(main())
