"""The private torch APIs npu_graph_export relies on, checked against the installed torch.

torch may move any of these in a minor release without notice. The tests below resolve every entry
on the installed torch and fail naming the one that moved, and scan the package's sources so that
a private torch name used there but missing from this list fails too. Checking a new torch release
is then this list, run through ``nox -s compat`` (docs/torch-compat.md). The list lives with the
tests, the only code that reads it, so it does not ship in the wheel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import npu_graph_export
import pytest
from private_api import PrivateApi


def _marked_dynamic_dims() -> object:
    """Where ``torch._dynamo.mark_dynamic`` records its dims on a tensor (raises if elsewhere)."""
    import torch

    marked = torch.zeros(2, 3)
    torch._dynamo.mark_dynamic(marked, 1)
    dims = marked._dynamo_dynamic_indices  # type: ignore[attr-defined]
    if set(dims) != {1}:
        raise LookupError(f"mark_dynamic(t, 1) left _dynamo_dynamic_indices = {dims!r}")
    return dims


PRIVATE_APIS: tuple[PrivateApi, ...] = (
    PrivateApi(
        "torch.Tensor._dynamo_dynamic_indices",
        "Dynamo",
        "_trace.py makes the dims a user marked with torch._dynamo.mark_dynamic dynamic in the "
        "export",
        probe=_marked_dynamic_dims,
    ),
    PrivateApi(
        "torch.fx.experimental._config.patch",
        "FX symbolic shapes",
        "_trace.py turns on size-oblivious reasoning while exporting with dynamic dims",
    ),
    PrivateApi(
        "torch.fx.experimental._config.backed_size_oblivious",
        "FX symbolic shapes",
        "_trace.py keeps a dynamic dim whose example size is 1 symbolic (no 0/1 specialisation)",
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.is_concrete_int",
        "FX symbolic shapes",
        "_trace.py and the converters tell static dims from symbolic ones (-1 in GE shapes)",
    ),
    PrivateApi(
        "torch.fx.experimental.symbolic_shapes.statically_known_true",
        "FX symbolic shapes",
        "_converters/movement.py pads by a size known only at run time only when it is provably "
        "not negative (PadV3 cannot crop)",
    ),
    PrivateApi(
        "torch._decomp.decomposition_table",
        "decompositions",
        "_trace.py decomposes interpolation (upsample_*) with torch's own decompositions, which "
        "keep PyTorch's indexing, instead of GE's resize operators",
    ),
    PrivateApi(
        "torch._check",
        "FX symbolic shapes",
        "_converters/symbolic.py drops the trace-time asserts export may leave as nodes",
    ),
    PrivateApi(
        "torch._check_is_size",
        "FX symbolic shapes",
        "_converters/symbolic.py drops the trace-time size asserts export may leave as nodes",
    ),
    PrivateApi(
        "torch._ops.OpOverload",
        "dispatch",
        "_converters/_base.py names an ATen op node by its overload and finds its converter",
    ),
    PrivateApi(
        "torch.distributed.distributed_c10d._resolve_process_group",
        "distributed",
        "_converters/collective.py finds the process group a traced collective names",
    ),
    PrivateApi(
        "torch.ops._c10d_functional.all_reduce",
        "distributed",
        "_converters/collective.py converts it to HcomAllReduce",
    ),
    PrivateApi(
        "torch.ops._c10d_functional.all_gather_into_tensor",
        "distributed",
        "_converters/collective.py converts it to HcomAllGather",
    ),
    PrivateApi(
        "torch.ops._c10d_functional.reduce_scatter_tensor",
        "distributed",
        "_converters/collective.py converts it to HcomReduceScatter",
    ),
    PrivateApi(
        "torch.ops._c10d_functional.wait_tensor",
        "distributed",
        "_converters/collective.py makes it an Identity (GE orders collectives itself)",
    ),
)


PACKAGE_DIR = Path(npu_graph_export.__file__).parent


@pytest.mark.parametrize("api", PRIVATE_APIS, ids=lambda api: api.name)
def test_private_torch_api_exists(api: PrivateApi, private_torch_apis: Any) -> None:
    private_torch_apis.check(api, "npu_graph_export")


def test_every_private_torch_name_used_is_listed(private_torch_apis: Any) -> None:
    unlisted = private_torch_apis.unlisted(PACKAGE_DIR, PRIVATE_APIS)
    assert not unlisted, f"add to PRIVATE_APIS above: {', '.join(unlisted)}"


def test_every_listed_name_is_used(private_torch_apis: Any) -> None:
    unused = private_torch_apis.unused(PACKAGE_DIR, PRIVATE_APIS)
    assert not unused, f"remove from PRIVATE_APIS above: {', '.join(unused)}"
