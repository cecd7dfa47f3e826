"""The record of one private torch name a package relies on.

Each package's ``tests/test_*_torch_private.py`` lists the private torch names its sources use as
``PrivateApi`` entries; the checks themselves are the ``private_torch_apis`` fixture of the root
``conftest.py``. This directory is on pytest's ``pythonpath`` (root ``pyproject.toml``), so every
package's tests import it the same way, and nothing of it ships in a wheel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

__all__ = ["PrivateApi"]


class PrivateApi(NamedTuple):
    """One private torch name and why the package needs it."""

    #: Dotted path, from ``torch`` (or ``torch_npu``).
    name: str
    #: Which part of torch: Dynamo, AOT autograd, Inductor, FX, allocator, graph, dispatch, ...
    area: str
    #: Where and what for, so that whoever finds it moved knows what breaks.
    use: str
    #: Non-empty where the code probes for the name and works without it: what is lost then.
    optional: str = ""
    #: ``"cuda"``: only CUDA builds of torch have it; ``"torch_npu"``: it is torch_npu's.
    needs: str = ""
    #: For a name no import reaches (an attribute torch sets at run time): returns it or raises.
    probe: Callable[[], object] | None = None
