"""The private torch APIs npu_mempool relies on, checked against the installed torch.

torch may move any of these in a minor release without notice. The tests below resolve every entry
on the installed torch and fail naming the one that moved, and scan the package's sources so that
a private torch name used there but missing from this list fails too. Checking a new torch release
is then this list, run through ``nox -s compat`` (docs/torch-compat.md). The list lives with the
tests, the only code that reads it, so it does not ship in the wheel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import npu_mempool
import pytest
from private_api import PrivateApi

PRIVATE_APIS: tuple[PrivateApi, ...] = (
    # The allocator's pool checkpoints: how a pool is rewound to the state after a capture, so
    # that graphs of one pool share memory (mode 2). Probed by Cuda.has_checkpoint_hooks.
    PrivateApi(
        "torch._C._cuda_getCheckpointState",
        "allocator",
        "_devices/cuda.py reads a graph pool's allocator state after each capture",
        optional="graphs of one pool no longer share memory by rewinding it (mode 2 off)",
        needs="cuda",
    ),
    PrivateApi(
        "torch._C._cuda_setCheckpointPoolState",
        "allocator",
        "_devices/cuda.py rewinds a graph pool to a saved state before the next capture",
        optional="graphs of one pool no longer share memory by rewinding it (mode 2 off)",
        needs="cuda",
    ),
    PrivateApi(
        "torch._C._cuda_checkPoolLiveAllocations",
        "allocator",
        "_devices/cuda.py checks that a rewound pool holds exactly the expected live blocks",
        optional="a rewind is not checked against the allocator's own view",
        needs="cuda",
    ),
    PrivateApi(
        "torch._C._cuda_clearCublasWorkspaces",
        "allocator",
        "_devices/cuda.py drops cuBLAS workspaces around captures so none is held by a pool",
        optional="a cuBLAS workspace made during a capture stays in the pool for good",
        needs="cuda",
    ),
    PrivateApi(
        "torch._C._cuda_endAllocateToPool",
        "graph",
        "_devices/cuda.py stops routing allocations to a pool after a failed capture",
        optional="after a failed capture later captures into that pool may be refused",
        needs="cuda",
    ),
    PrivateApi(
        "torch._C._cuda_releasePool",
        "graph",
        "_devices/cuda.py releases a pool after a failed capture",
        optional="after a failed capture later captures into that pool may be refused",
        needs="cuda",
    ),
    PrivateApi(
        "torch_npu._C._npu_getCheckpointState",
        "allocator",
        "_devices/npu.py reads a graph pool's allocator state after each capture",
        optional="graphs of one pool no longer share memory by rewinding it (mode 2 off)",
        needs="torch_npu",
    ),
    PrivateApi(
        "torch_npu._C._npu_setCheckpointPoolState",
        "allocator",
        "_devices/npu.py rewinds a graph pool to a saved state before the next capture",
        optional="graphs of one pool no longer share memory by rewinding it (mode 2 off)",
        needs="torch_npu",
    ),
    PrivateApi(
        "torch_npu._C._npu_checkPoolLiveAllocations",
        "allocator",
        "_devices/npu.py checks that a rewound pool holds exactly the expected live blocks",
        optional="a rewind is not checked against the allocator's own view",
        needs="torch_npu",
    ),
    PrivateApi(
        "torch_npu._C._npu_endAllocateToPool",
        "graph",
        "_devices/npu.py stops routing allocations to a pool after a failed capture",
        optional="after a failed capture later captures into that pool may be refused",
        needs="torch_npu",
    ),
    PrivateApi(
        "torch_npu._C._npu_endAllocateCurrentStreamToPool",
        "graph",
        "_devices/npu.py: _npu_endAllocateToPool's name in torch_npu 2.11 and 2.12",
        optional="after a failed capture later captures into that pool may be refused",
        needs="torch_npu",
    ),
    PrivateApi(
        "torch_npu._C._npu_releasePool",
        "graph",
        "_devices/npu.py releases a pool after a failed capture",
        optional="after a failed capture later captures into that pool may be refused",
        needs="torch_npu",
    ),
    PrivateApi(
        "torch._C._storage_Use_Count",
        "allocator",
        "_outputs.storage_uses counts the tensors over a static output before it is overwritten",
    ),
    PrivateApi(
        "torch._debug_has_internal_overlap",
        "dispatch",
        "_capture gives an input whose elements share memory (an expanded tensor) a buffer",
    ),
    PrivateApi(
        "torch._C.TensorBase.data_ptr",
        "dispatch",
        "_runner reads the watched inputs' addresses with the C method itself on every call",
    ),
    PrivateApi(
        "torch._C.TensorBase.size",
        "dispatch",
        "_bound compares a bound graph's USER tensors with its layout by mapping the C methods",
    ),
    PrivateApi(
        "torch._C.TensorBase.stride",
        "dispatch",
        "_bound compares a bound graph's USER tensors with its layout by mapping the C methods",
    ),
    PrivateApi(
        "torch._C._dynamo.guards.TensorGuards",
        "Dynamo",
        "_bound checks a bound graph's USER tensors (dtype, device, shape, strides) in one C call",
        optional="a bound graph checks its inputs with the C methods mapped instead (slower)",
    ),
    PrivateApi(
        "torch._C._is_any_autocast_enabled",
        "autocast",
        "_keys tells autocast's state apart in a graph key, _capture turns autocast's weight "
        "cache off while it captures; one C call per call while autocast is off",
    ),
    PrivateApi(
        "torch._foreach_copy_",
        "dispatch",
        "_entry and the emulated graph copy every input into its static buffer in one call",
    ),
    PrivateApi("torch.utils._pytree.TreeSpec", "pytree", "_outputs keeps the structure of outputs"),
    PrivateApi(
        "torch.utils._pytree.tree_flatten", "pytree", "_outputs flattens a callable's outputs"
    ),
    PrivateApi(
        "torch.utils._pytree.tree_unflatten",
        "pytree",
        "_outputs rebuilds the outputs' container around the static leaves",
    ),
    PrivateApi(
        "torch.Tensor._make_wrapper_subclass",
        "dispatch",
        "_steps.StaleTensor: what an output overwritten after a step boundary becomes",
    ),
    PrivateApi(
        "torch._C.DisableTorchFunctionSubclass",
        "dispatch",
        "_steps.StaleTensor answers shape, dtype and device reads of an overwritten output",
    ),
    PrivateApi(
        "torch._inductor.cudagraph_trees.MarkStepBox",
        "Inductor",
        "_steps reads torch's step counter (cudagraph_mark_step_begin) as a step boundary",
        optional="torch.compiler.cudagraph_mark_step_begin() is no step boundary here "
        "(npu_mempool.mark_step_begin() still is)",
    ),
    PrivateApi(
        "torch._dynamo.mutation_guard.GenerationTracker",
        "Dynamo",
        "_steps reads its generation (bumped on every entry into a torch.compile'd function) to "
        "begin a step per call where no top_level_call() block says so, as CUDA Graph Trees do",
        optional="outside top_level_call() blocks (torch.compile with a backend other than "
        "Inductor) a call begins no step: held outputs take another call path instead",
    ),
    PrivateApi(
        "torch.Tensor._use_count",
        "autograd",
        "_steps takes back an output only where nothing but the caller's object holds it (what "
        "torch.utils.swap_tensors requires), not autograd",
    ),
    PrivateApi(
        "torch._C._swap_tensor_impl",
        "autograd",
        "_steps.take_back_outputs swaps an overwritten output for a StaleTensor as "
        "torch.utils.swap_tensors does, without its Python frames, where its checks pass outright",
        optional="every overwritten output is swapped by torch.utils.swap_tensors (slower)",
    ),
    PrivateApi(
        "torch._logging._internal.trace_structured",
        "logging",
        "_trace writes a capture event into TORCH_TRACE (tlparse)",
    ),
    PrivateApi(
        "torch.autograd.profiler._is_profiler_enabled",
        "profiler",
        "_trace opens profiler ranges only while a profiler records; _entry reads it on every "
        "replay (a flag read, no call) to take the profiled replay",
    ),
)


PACKAGE_DIR = Path(npu_mempool.__file__).parent


@pytest.mark.parametrize("api", PRIVATE_APIS, ids=lambda api: api.name)
def test_private_torch_api_exists(api: PrivateApi, private_torch_apis: Any) -> None:
    private_torch_apis.check(api, "npu_mempool")


def test_every_private_torch_name_used_is_listed(private_torch_apis: Any) -> None:
    unlisted = private_torch_apis.unlisted(PACKAGE_DIR, PRIVATE_APIS)
    assert not unlisted, f"add to PRIVATE_APIS above: {', '.join(unlisted)}"


def test_every_listed_name_is_used(private_torch_apis: Any) -> None:
    unused = private_torch_apis.unused(PACKAGE_DIR, PRIVATE_APIS)
    assert not unused, f"remove from PRIVATE_APIS above: {', '.join(unused)}"
