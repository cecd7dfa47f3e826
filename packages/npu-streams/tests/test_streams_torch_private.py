"""The private torch APIs npu_streams relies on, checked against the installed torch.

torch may move any of these in a minor release without notice. The tests below resolve every entry
on the installed torch and fail naming the one that moved, and scan the package's sources so that
a private torch name used there but missing from this list fails too. Checking a new torch release
is then this list, run through ``nox -s compat`` (docs/torch-compat.md). The list lives with the
tests, the only code that reads it, so it does not ship in the wheel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import npu_streams
import pytest
from private_api import PrivateApi

PRIVATE_APIS: tuple[PrivateApi, ...] = (
    PrivateApi(
        "torch._ops.OpOverload",
        "dispatch",
        "_ops.OVERLOADS annotates the stream ops' overloads (the type only)",
    ),
)


PACKAGE_DIR = Path(npu_streams.__file__).parent


@pytest.mark.parametrize("api", PRIVATE_APIS, ids=lambda api: api.name)
def test_private_torch_api_exists(api: PrivateApi, private_torch_apis: Any) -> None:
    private_torch_apis.check(api, "npu_streams")


def test_every_private_torch_name_used_is_listed(private_torch_apis: Any) -> None:
    unlisted = private_torch_apis.unlisted(PACKAGE_DIR, PRIVATE_APIS)
    assert not unlisted, f"add to PRIVATE_APIS above: {', '.join(unlisted)}"


def test_every_listed_name_is_used(private_torch_apis: Any) -> None:
    unused = private_torch_apis.unused(PACKAGE_DIR, PRIVATE_APIS)
    assert not unused, f"remove from PRIVATE_APIS above: {', '.join(unused)}"
