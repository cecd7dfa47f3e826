"""The NPU contract checker behind ``.ci/check_npu_contracts.py``, one module per concern.

Each module imports only those above it in this list: ``_inventory`` (``npu_contracts.toml``
and release ranges), ``_archives`` (the wheels' and sdists' files), ``_found`` (what resolving
a name finds, a module's namespace), ``_resolve`` (the ``Resolver``), ``_params`` (binding calls
to parameters), ``_check`` (one entry's verdict) and ``_sources`` (the names our sources use).
The script keeps the command line and re-exports these names.
"""

from __future__ import annotations

from ._archives import Sources
from ._check import FAILING, STATUSES, Result, Status, check_entry
from ._found import Found, FoundKind, Missing, ModuleFile, Outside, Resolution
from ._inventory import INVENTORY, Entry, in_range, load_inventory, release_range
from ._params import bind_problem, parse_call
from ._resolve import Resolver
from ._sources import is_npu_name, npu_names_used

__all__ = [
    "INVENTORY",
    "Entry",
    "load_inventory",
    "release_range",
    "in_range",
    "Sources",
    "ModuleFile",
    "FoundKind",
    "Found",
    "Missing",
    "Outside",
    "Resolution",
    "Resolver",
    "parse_call",
    "bind_problem",
    "Status",
    "STATUSES",
    "FAILING",
    "Result",
    "check_entry",
    "is_npu_name",
    "npu_names_used",
]
