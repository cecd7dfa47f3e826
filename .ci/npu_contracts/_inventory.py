"""The inventory: ``npu_contracts.toml`` read into entries, and the release ranges they name.

``Entry`` is one name our NPU code uses, as the inventory lists it; ``load_inventory`` reads and
checks the file (a malformed entry stops with one line naming it); ``release_range`` and
``in_range`` read and test the ``releases`` ranges (``torch_npu>=2.11,<2.13``). The bottom of
the package: it imports nothing from its siblings.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

INVENTORY = Path(__file__).resolve().parent.parent / "npu_contracts.toml"


@dataclass(frozen=True)
class Entry:
    """One name our NPU code uses, as ``npu_contracts.toml`` lists it."""

    #: The qualified name as our code reaches it (``torch_npu.npu.Stream``, ``torch.npu.foo``).
    name: str
    #: Our modules that use it (``npu_mempool._devices.npu``).
    users: tuple[str, ...]
    #: What for, so that whoever finds it moved knows what breaks.
    use: str
    #: Each distinct call we make, written as in our code: ``"(device, priority=priority)"``.
    calls: tuple[str, ...] = ()
    #: For a method our subclass overrides: our parameters, ``"(cls)"``.
    override: str = ""
    #: The decorator of our override (``classmethod``), which the base method must have too.
    decorator: str = ""
    #: ``namespace::name`` of the operator behind a name torch_npu exports from ``torch.ops``.
    op: str = ""
    #: Non-empty where the code probes for the name and works without it: what is lost then.
    optional: str = ""
    #: The releases that have the name, where others use another one (``torch_npu<2.13``): in
    #: a release outside the range its absence is expected.
    releases: str = ""


_ENTRY_KEYS = frozenset(Entry.__dataclass_fields__)


def load_inventory(path: Path = INVENTORY) -> list[Entry]:
    """Read the inventory; a malformed entry stops with one line naming it."""
    with path.open("rb") as f:
        raw = tomllib.load(f).get("api", [])
    entries: list[Entry] = []
    for item in raw:
        name = item.get("name", "<no name>")
        unknown = sorted(set(item) - _ENTRY_KEYS)
        if unknown:
            raise SystemExit(f"{path.name}: entry {name} has unknown keys {unknown}")
        if not item.get("users") or not item.get("use"):
            raise SystemExit(f"{path.name}: entry {name} needs `users` and `use`")
        entries.append(
            Entry(
                name=name,
                users=tuple(item["users"]),
                use=item["use"],
                calls=tuple(item.get("calls", ())),
                override=item.get("override", ""),
                decorator=item.get("decorator", ""),
                op=item.get("op", ""),
                optional=item.get("optional", ""),
                releases=item.get("releases", ""),
            )
        )
        if entries[-1].releases:
            release_range(entries[-1].releases)  # stops on a range it cannot read
    names = [entry.name for entry in entries]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise SystemExit(f"{path.name}: listed more than once: {', '.join(twice)}")
    return entries


_CLAUSE = re.compile(r"(>=|<=|==|!=|<|>)\s*(\d+(?:\.\d+)*)")


def release_range(text: str) -> tuple[str, list[tuple[str, tuple[int, ...]]]]:
    """``"torch_npu>=2.11,<2.13"`` as the distribution and its ``(operator, release)`` clauses."""
    match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(.+)", text)
    clauses = _CLAUSE.findall(match.group(2)) if match else []
    if match is None or not clauses or _CLAUSE.sub("", match.group(2)).strip(" ,"):
        raise SystemExit(f"not a release range: {text!r} (write it as torch_npu>=2.11,<2.13)")
    return _normal(match.group(1)), [(op, _release(v)) for op, v in clauses]


def in_range(version: str, text: str) -> bool:
    """Whether ``version`` (``2.12.0.post3``) is in the range ``text`` (its release part counts)."""
    release = _release(version)
    width = 4
    ours = release + (0,) * (width - len(release))
    for op, bound in release_range(text)[1]:
        other = bound + (0,) * (width - len(bound))
        if not {
            ">=": ours >= other,
            "<=": ours <= other,
            "==": ours == other,
            "!=": ours != other,
            "<": ours < other,
            ">": ours > other,
        }[op]:
            return False
    return True


def _release(version: str) -> tuple[int, ...]:
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def _normal(distribution: str) -> str:
    return re.sub(r"[-_.]+", "_", distribution).lower()
