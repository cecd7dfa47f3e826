"""The private torch APIs npu_streams lists (``_torch_private``) exist on the installed torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import npu_streams
import pytest
from npu_streams._torch_private import PRIVATE_APIS, PrivateApi

PACKAGE_DIR = Path(npu_streams.__file__).parent


@pytest.mark.parametrize("api", PRIVATE_APIS, ids=lambda api: api.name)
def test_private_torch_api_exists(api: PrivateApi, private_torch_apis: Any) -> None:
    private_torch_apis.check(api, "npu_streams")


def test_every_private_torch_name_used_is_listed(private_torch_apis: Any) -> None:
    unlisted = private_torch_apis.unlisted(PACKAGE_DIR, PRIVATE_APIS)
    assert not unlisted, f"add to npu_streams/_torch_private.py: {', '.join(unlisted)}"


def test_every_listed_name_is_used(private_torch_apis: Any) -> None:
    unused = private_torch_apis.unused(PACKAGE_DIR, PRIVATE_APIS)
    assert not unused, f"remove from npu_streams/_torch_private.py: {', '.join(unused)}"
