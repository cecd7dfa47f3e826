"""Check the torch_npu, ``torch.npu`` and vllm-ascend names our NPU code uses against real releases.

``npu_contracts.toml`` (next to this script) lists every such name: the calls our code makes with
it or the method our vLLM platform overrides, which module uses it and what for. This script
resolves each entry in the wheels (or sdists) given on the command line by reading their files,
never importing or installing them: installing torch_npu on a machine without CANN breaks
``import torch``. A Python name is followed by AST (module, its imports and star imports,
submodules, class, base classes, method) and each call we make is bound to the parameters found;
a name in a C extension (``torch_npu._C._npu_...``) is looked up in the ``.pyi`` stub the wheel
ships or else among the strings of its shared libraries, with the wheel's own Python callers as
evidence for the arguments. ``torch.npu`` is whatever module torch_npu registers as torch's
``npu`` device module (``torch._register_device_module("npu", ...)``).

One line per entry: ``ok``, ``MOVED`` (not found; where it looked), ``CHANGED`` (found, but a call
we make no longer binds, or an overridden method's signature differs from ours) or
``UNVERIFIABLE`` (why). The exit status is 1 when any entry is MOVED or CHANGED. ``nox -s
npu_contracts`` downloads the pinned releases and runs it; by hand::

    python .ci/check_npu_contracts.py torch_npu-2.14.0-*.whl vllm_ascend-0.23.0-*.whl

This file is the command line; the checker is the package ``npu_contracts/`` beside it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

# The checker is the package beside this script; a script run puts this directory on sys.path,
# an import by file path (the tests) does not.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from npu_contracts import (  # noqa: E402
    FAILING,
    INVENTORY,
    STATUSES,
    Resolver,
    Result,
    Sources,
    check_entry,
    in_range,
    load_inventory,
    npu_names_used,
    parse_call,
)

# The command line, and the checker's functions the tests reach through this file (the rest is
# in the package, `npu_contracts.__all__`).
__all__ = ["run", "main", "in_range", "load_inventory", "npu_names_used", "parse_call"]


# --- command line


def run(archives: Sequence[Path], inventory: Path = INVENTORY) -> tuple[list[Result], str]:
    """Check every entry against the archives; return the results and a summary line."""
    entries = load_inventory(inventory)
    sources = Sources(archives)
    try:
        resolver = Resolver(sources)
        results = [check_entry(entry, resolver) for entry in entries]
    finally:
        sources.close()
    versions = ", ".join(f"{name} {version}" for name, version in sources.distributions)
    counts = ", ".join(f"{sum(r.status == s for r in results)} {s}" for s in STATUSES)
    summary = f"{len(results)} names checked against {versions or 'the archives'}: {counts}"
    return results, summary


def main(argv: Sequence[str] | None = None) -> int:
    """Print one line per inventory entry; 1 when any is MOVED or CHANGED."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("archives", nargs="+", type=Path, help="wheels or sdists to read")
    parser.add_argument("--inventory", type=Path, default=INVENTORY, help="the names to check")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.archives if not p.is_file()]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    results, summary = run(args.archives, args.inventory)
    for result in results:
        print(result.line())
    print(summary)
    return 1 if any(r.status in FAILING for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
