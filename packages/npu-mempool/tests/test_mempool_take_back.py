"""Taking back a held output of an ended step: the same outcome whichever way torch swaps it.

``_steps.take_back_outputs`` poisons a plain tensor with torch.utils.swap_tensors' own steps run
inline, and leaves everything else to swap_tensors. These cases pin what the caller sees in the
``out = f(x)`` loop with one step per call (the outcomes the swap_tensors-only code gave), and
compare the inline swap with swap_tensors on identical tensors.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
from npu_mempool import CaptureOptions, GraphRunner, StaleOutputError, top_level_call
from npu_mempool._steps import StaleTensor, take_back_outputs

TAKEN, KEPT = "taken back", "kept"  # poisoned on the same path / left valid, another path taken


def _keep_plain(out: torch.Tensor) -> list[Any]:
    return [out]


def _keep_requires_grad(out: torch.Tensor) -> list[Any]:
    out.requires_grad_()  # a leaf: no autograd node holds it yet
    return [out]


def _keep_saved_for_backward(out: torch.Tensor) -> list[Any]:
    w = torch.ones(4, requires_grad=True)
    with torch.enable_grad():  # also where the test runs under no_grad
        return [out, (out * w).sum(), w]  # autograd saved `out` for w's gradient


def _keep_autograd_leaf(out: torch.Tensor) -> list[Any]:
    out.requires_grad_()
    with torch.enable_grad():
        return [out, (out * 3).sum()]  # out's AccumulateGrad node exists


def _keep_view(out: torch.Tensor) -> list[Any]:
    return [out, out[1:3]]


def _keep_in_containers(out: torch.Tensor) -> list[Any]:
    return [out, [out], {"out": out}]


def _keep_weakref(out: torch.Tensor) -> list[Any]:
    return [out, weakref.ref(out)]


def _keep_attribute(out: torch.Tensor) -> list[Any]:
    out.tag = "mine"  # type: ignore[attr-defined]
    return [out]


CASES: dict[str, tuple[Callable[[torch.Tensor], list[Any]], str]] = {
    "held plainly": (_keep_plain, TAKEN),
    "requires_grad set on it": (_keep_requires_grad, TAKEN),
    "held in containers": (_keep_in_containers, TAKEN),
    "an attribute set on it": (_keep_attribute, TAKEN),
    "saved for backward": (_keep_saved_for_backward, KEPT),
    "a leaf of autograd's graph": (_keep_autograd_leaf, KEPT),
    "a view of it held": (_keep_view, KEPT),
    "a weak reference to it held": (_keep_weakref, KEPT),
}


@pytest.mark.parametrize("case", CASES)
def test_a_held_output_is_taken_back_only_where_nothing_but_the_caller_uses_it(case: str) -> None:
    keep, outcome = CASES[case]
    runner = GraphRunner(lambda x: x * 2, options=CaptureOptions(keep_held_outputs=False))
    function = runner.as_function()
    for value in (0.0, 0.0):
        with top_level_call():
            function(torch.full((4,), value))
    with top_level_call():
        held = keep(function(torch.ones(4)))
    old = held[0]
    with top_level_call():
        out = function(torch.full((4,), 5.0))
    torch.testing.assert_close(out, torch.full((4,), 10.0))
    if outcome == TAKEN:
        assert (runner.num_paths, runner.counters.replays) == (1, 3)
        assert type(old) is StaleTensor
        assert (old.shape, old.dtype, old.requires_grad) == ((4,), torch.float32, False)
        assert not hasattr(old, "tag")  # its attributes went with the memory, as swap_tensors does
        with pytest.raises(StaleOutputError):
            old.tolist()
        for box in held[1:]:
            assert next(iter(box.values() if isinstance(box, dict) else box)) is old
    else:
        assert (runner.num_paths, runner.num_graphs) == (2, 2)
        assert type(old) is torch.Tensor
        assert old.tolist() == [2.0] * 4
        if case == "a view of it held":
            assert held[1].tolist() == [2.0] * 2
        if case == "a weak reference to it held":
            assert held[1]() is old
        if len(held) > 1 and isinstance(held[1], torch.Tensor) and held[1].requires_grad:
            held[1].backward()  # autograd's record of `old` still works


def _like_swap_tensors(make: Callable[[], torch.Tensor]) -> tuple[Any, Any]:
    """take_back_outputs and swap_tensors, each on its own copy of the same tensor."""
    inline, reference = make(), make()
    assert take_back_outputs([inline], (), "stale") == []
    stale = StaleTensor(reference, "stale")
    torch.utils.swap_tensors(reference, stale)  # type: ignore[no-untyped-call]
    return inline, reference


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(6.0).reshape(2, 3),
        lambda: torch.arange(8.0)[2:6],
        lambda: torch.arange(6.0).reshape(2, 3).t(),
        lambda: torch.ones(3).requires_grad_(),
        lambda: torch.ones(2, dtype=torch.int64),
    ],
    ids=["matrix", "view with offset", "transposed", "requires grad", "int64"],
)
def test_the_inline_swap_leaves_what_swap_tensors_leaves(make: Callable[[], torch.Tensor]) -> None:
    inline, reference = _like_swap_tensors(make)
    for tensor in (inline, reference):
        assert type(tensor) is StaleTensor
        assert tensor._message == "stale"
        with pytest.raises(StaleOutputError):
            tensor.sum()
    assert inline.__dict__ == reference.__dict__
    assert tuple(inline.shape) == tuple(reference.shape)
    assert inline.stride() == reference.stride()
    assert inline.dtype == reference.dtype
    assert inline.device == reference.device
    assert inline.requires_grad == reference.requires_grad


def test_the_old_memory_is_released_by_the_inline_swap() -> None:
    tensor = torch.arange(4.0)
    storage = tensor.untyped_storage()
    uses = torch._C._storage_Use_Count(storage._cdata)
    assert take_back_outputs([tensor], (), "stale") == []
    assert torch._C._storage_Use_Count(storage._cdata) == uses - 1


def test_anything_but_a_plain_unreferenced_tensor_goes_through_swap_tensors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Any] = []
    swap = torch.utils.swap_tensors

    def counted(a: torch.Tensor, b: torch.Tensor) -> None:
        calls.append(a)
        swap(a, b)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(torch.utils, "swap_tensors", counted)
    plain = torch.ones(2)
    assert take_back_outputs([plain], (), "stale") == []
    assert calls == []  # inline
    referenced = torch.ones(2)
    ref = weakref.ref(referenced)
    assert take_back_outputs([referenced], (), "stale") == [0]  # swap_tensors refuses
    assert calls == [referenced]
    assert ref() is referenced
    assert type(referenced) is torch.Tensor
    subclass = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    assert take_back_outputs([subclass], (), "stale") == []
    assert len(calls) == 2
    assert type(subclass) is StaleTensor
    saved = torch.ones(2, requires_grad=True)
    with torch.enable_grad():  # saved's AccumulateGrad node holds it: swap_tensors poisons it
        loss = (saved * 2).sum()
    assert take_back_outputs([saved], (), "stale") == []
    assert len(calls) == 3
    assert type(saved) is StaleTensor
    del loss
