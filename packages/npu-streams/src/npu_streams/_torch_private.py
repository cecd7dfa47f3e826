"""The private torch APIs npu_streams relies on, in one list.

torch may move any of these in a minor release without notice. The package's tests
(``tests/test_*_torch_private.py``) resolve every entry on the installed torch and fail naming the
one that moved, and scan the sources so that a private torch name used here but missing from this
list fails too. Checking a new torch release is then this list, run through ``nox -s compat``
(docs/torch-compat.md).
"""

from __future__ import annotations

from npu_streams._private_api import PrivateApi

__all__ = ["PRIVATE_APIS", "PrivateApi"]


PRIVATE_APIS: tuple[PrivateApi, ...] = (
    PrivateApi(
        "torch._ops.OpOverload",
        "dispatch",
        "_ops.OVERLOADS annotates the stream ops' overloads (the type only)",
    ),
)
