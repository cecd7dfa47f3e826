"""The Python calls one replay of a captured graph makes, around the graph's own replay.

What is counted: every Python frame opened from the call into ``runner.as_function()``'s function
(that frame included) until it returns: the dispatch, the input copy, the call of the graph's
``replay`` (its frame included) and the output hand-out. Not counted: the frames inside the
graph's replay, where the CPU emulation re-runs the user's ops (a device graph replays without a
Python frame), and C calls. Each case first checks that the counted call was a replay that ran the
user's function once, inside the graph's replay.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch
from npu_mempool import (
    CaptureOptions,
    GraphRunner,
    InputKind,
    StaleOutputError,
    top_level_call,
)
from npu_mempool._devices import emulated
from npu_mempool._steps import StaleTensor

P, M, U = InputKind.PARAMETER, InputKind.MUTATED, InputKind.USER

#: The most Python calls a replay may make (see the module docstring for what counts).
MOST_CALLS = 10


class Counted:
    """The frames one call opened outside the graph's replay, and the user's calls inside it."""

    def __init__(self, user: Callable[..., Any]) -> None:
        self.frames: list[str] = []
        self.user_inside = 0
        self.user_outside = 0
        self._user = user.__code__
        self._graph_replay = emulated.EmulatedGraph.replay.__code__
        self._inside = 0  # frames open inside the graph's replay

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            code = frame.f_code
            if self._inside:
                self._inside += 1
                self.user_inside += code is self._user
                return
            if code is self._user:
                self.user_outside += 1
                return
            self.frames.append(f"{Path(code.co_filename).name}:{code.co_name}")
            if code is self._graph_replay:
                self._inside = 1
        elif event == "return" and self._inside:
            self._inside -= 1

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        gc.disable()  # no finalizer's frames in the count
        sys.setprofile(self.profile)
        try:
            return function(*args)
        finally:
            sys.setprofile(None)
            gc.enable()


def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def decode(x: torch.Tensor, w: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, ...]:
    cache.add_(1)
    return x @ w, cache.sum(dim=0)


def pair(x: torch.Tensor, n: int) -> list[torch.Tensor]:
    return [x + n, x - n]


WEIGHT = torch.randn(4, 3)
CACHE = torch.zeros(5, 3)  # updated in place by every call
CASES: dict[str, tuple[Callable[..., Any], dict[str, Any], Callable[[], tuple[Any, ...]]]] = {
    "one user tensor": (scale, {}, lambda: (torch.randn(4),)),
    "user, parameter and mutated in, a tuple out": (
        decode,
        {"input_kinds": [U, P, M]},
        lambda: (torch.randn(2, 4), WEIGHT, CACHE),
    ),
    "every argument guarded": (
        decode,
        {"input_kinds": [U, P, M], "guarded": [True, True, True]},
        lambda: (torch.randn(2, 4), WEIGHT, CACHE),
    ),
    "one step per call, a list out": (
        pair,
        {"options": CaptureOptions(keep_held_outputs=False)},
        lambda: (torch.randn(3), 2),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_replay_through_as_function_makes_at_most_ten_python_calls(case: str) -> None:
    fn, kwargs, make_args = CASES[case]
    runner = GraphRunner(fn, **kwargs)
    function = runner.as_function()
    function(*make_args())  # captures
    function(*make_args())  # replays once: anything done on a first replay only is done
    args = make_args()
    expected = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    replays = runner.counters.replays
    counted = Counted(fn)
    out = counted.call(function, *args)
    assert runner.counters.replays == replays + 1
    assert runner.counters.captures == 1
    torch.testing.assert_close(out, expected)
    assert (counted.user_inside, counted.user_outside) == (1, 0), "not the graph's replay"
    assert "emulated.py:replay" in counted.frames
    assert len(counted.frames) <= MOST_CALLS, (
        f"a replay made {len(counted.frames)} Python calls: {', '.join(counted.frames)}"
    )


#: The most Python calls a replay may make that first takes back the previous call's output (one
#: step per call, the caller still holding what the previous call returned), or moves it out of
#: the pool where the call passes it back in (``h = f(h)``): the seven of a free graph, then the
#: take-back, its step check and the poisoning or moving of the old outputs (one call for all of
#: them). 41 (58 with two outputs) before the take-back was first shortened, 12 after.
MOST_TAKE_BACK_CALLS = 10


@pytest.mark.skipif(
    not hasattr(torch._C, "_swap_tensor_impl"),
    reason="this torch has no torch._C._swap_tensor_impl",
)
@pytest.mark.parametrize("case", ["one tensor out", "a tuple out"])
def test_the_out_equals_f_of_x_loop_takes_back_the_previous_output_in_few_python_calls(
    case: str,
) -> None:
    # for x in data: out = f(x), with one step per call (npu-compile's default): every call
    # finds the previous output still held and takes it back before it replays.
    fn: Callable[[torch.Tensor], Any] = scale if case == "one tensor out" else _two
    runner = GraphRunner(fn, options=CaptureOptions(keep_held_outputs=False))
    function = runner.as_function()
    data = [torch.randn(4) for _ in range(4)]
    out: Any = None
    for x in data[:3]:  # captures, replays from a free graph, then takes back
        with top_level_call():  # what Dynamo enters around every call of a compiled function
            out = function(x)
    previous = out
    counted = Counted(fn)
    with top_level_call():
        out = counted.call(function, data[3])
    assert (runner.counters.captures, runner.counters.replays) == (1, 3)
    assert (runner.num_paths, runner.num_graphs) == (1, 1), "not taken back"
    torch.testing.assert_close(out, fn(data[3]))  # eager's result
    # The caller's old output was taken back: poisoned, as before (its memory holds `out` now).
    for old in (previous,) if case == "one tensor out" else previous:
        assert type(old) is StaleTensor
        with pytest.raises(StaleOutputError):
            old.tolist()
    assert (counted.user_inside, counted.user_outside) == (1, 0), "not the graph's replay"
    assert "emulated.py:replay" in counted.frames
    assert len(counted.frames) <= MOST_TAKE_BACK_CALLS, (
        f"a take-back replay made {len(counted.frames)} Python calls: {', '.join(counted.frames)}"
    )


def test_the_out_equals_f_of_x_loop_on_two_call_paths_asks_the_held_graph_last() -> None:
    # for x in data: out = f(x), every held output kept (GraphRunner's default): the runner has
    # two call paths and every call finds the graph it did not replay last free. It asks that
    # one first, so that no call opens the take-back attempt of the held graph's outputs.
    runner = GraphRunner(scale)
    function = runner.as_function()
    data = [torch.randn(4) for _ in range(8)]
    out: Any = None
    for x in data[:4]:  # captures, captures a second call path, replays on each
        out = function(x)
    assert (runner.num_paths, runner.num_graphs, runner.counters.replays) == (2, 2, 2)
    for x in data[4:]:
        previous, kept = out, out.clone()
        counted = Counted(scale)
        out = counted.call(function, x)
        torch.testing.assert_close(out, scale(x), rtol=0, atol=0)
        torch.testing.assert_close(previous, kept, rtol=0, atol=0)  # held: not overwritten
        assert (counted.user_inside, counted.user_outside) == (1, 0), "not the graph's replay"
        assert not [f for f in counted.frames if f.endswith(("_release", "steps_ended"))], (
            f"the held graph was asked first: {', '.join(counted.frames)}"
        )
    assert (runner.num_paths, runner.num_graphs, runner.counters.replays) == (2, 2, 6)


def _affine(h: torch.Tensor) -> torch.Tensor:
    return h * 2 + 1


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad mode", "no_grad"])
def test_the_h_equals_f_of_h_loop_keeps_the_values_of_the_previous_output(grad_mode: bool) -> None:
    # The previous output passed back in (a USER argument) is moved out of the pool, not
    # poisoned: the caller's old tensor keeps its values while the graph reuses its memory.
    runner = GraphRunner(_affine, options=CaptureOptions(keep_held_outputs=False))
    function = runner.as_function()
    h = torch.arange(4.0)
    expected = h.clone()
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    frames: list[str] = []
    for step in range(5):
        with top_level_call(), torch.set_grad_enabled(grad_mode):
            old = h
            if step < 4:
                h = function(h)
            else:  # counted: a call that moves the previous output out of the pool
                counted = Counted(_affine)
                h = counted.call(function, h)
                frames = counted.frames
        expected = expected * 2 + 1
        seen.append((old, old.clone()))
        torch.testing.assert_close(h, expected)
    for old, values in seen:
        assert type(old) is torch.Tensor
        assert not old.requires_grad
        torch.testing.assert_close(old, values)
    assert (runner.num_paths, runner.num_graphs, runner.counters.captures) == (1, 1, 1)
    assert "emulated.py:replay" in frames
    assert len(frames) <= MOST_TAKE_BACK_CALLS, (
        f"a replay that moved its input out of the pool made {len(frames)} Python calls: "
        f"{', '.join(frames)}"
    )


def _two(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x + 1, x * 3
