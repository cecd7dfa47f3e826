"""The private torch APIs npu_streams relies on, in one list.

torch may move any of these in a minor release without notice. The package's tests
(``tests/test_*_torch_private.py``) resolve every entry on the installed torch and fail naming the
one that moved, and scan the sources so that a private torch name used here but missing from this
list fails too. Checking a new torch release is then this list, run through ``nox -s compat``
(docs/torch-compat.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

__all__ = ["PRIVATE_APIS", "PrivateApi"]


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


PRIVATE_APIS: tuple[PrivateApi, ...] = (
    PrivateApi(
        "torch._ops.OpOverload",
        "dispatch",
        "_ops.OVERLOADS annotates the stream ops' overloads (the type only)",
    ),
)
