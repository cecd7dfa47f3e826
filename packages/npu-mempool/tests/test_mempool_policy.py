"""The capture policy on its own: warm-up, churn, capture limit and failures, as decisions."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest
import torch
from npu_mempool import CaptureChurnWarning, CaptureLimitWarning, CaptureOptions, InputKind
from npu_mempool._keys import Layout
from npu_mempool._policy import (
    CHURN_LIMIT,
    UNREPLAYED_LIMIT,
    Action,
    CapturePolicy,
    Decision,
    Reason,
)

U = InputKind.USER


def _never() -> int:
    raise AssertionError("not asked for")


class Calls:
    """Feeds a policy the misses of one runner whose calls are ``(tensor, int)``."""

    def __init__(self, options: CaptureOptions, device_warmup: int = 0) -> None:
        self.policy = CapturePolicy(options)
        self.layout = Layout((torch.zeros(2), 0), [U, U], frozen=False, guarded=None)
        self.device_warmup = device_warmup
        self.replays = 0
        self.graphs = 0

    def miss(self, args: tuple[Any, ...], *, known: bool = False, room: int = 0) -> Decision:
        key: Hashable = self.layout.key(args)
        decision = self.policy.on_miss(
            key,
            args,
            self.layout,
            known=known,
            graphs=self.graphs,
            replays=self.replays,
            make_room=lambda: room,
            device_warmup=lambda: self.device_warmup,
            name="step",
        )
        if decision.action is Action.CAPTURE:
            self.graphs += 1
        return decision


def test_a_new_key_runs_its_warmup_calls_eagerly_then_captures() -> None:
    calls = Calls(CaptureOptions(warmup_runs=2))
    args = (torch.zeros(2), 1)
    assert [calls.miss(args).reason for _ in range(3)] == [
        Reason.WARMUP,
        Reason.WARMUP,
        Reason.NEW_GRAPH,
    ]
    assert calls.miss(args, known=True) == Decision(Action.CAPTURE, Reason.NEW_GRAPH)


def test_the_device_default_warmup_applies_only_without_the_option() -> None:
    device = Calls(CaptureOptions(), device_warmup=1)
    assert device.miss((torch.zeros(2), 1)).action is Action.EAGER
    assert device.miss((torch.zeros(2), 1)).action is Action.CAPTURE
    given = CapturePolicy(CaptureOptions(warmup_runs=0))
    layout = Layout((torch.zeros(2),), None, frozen=False, guarded=None)
    decision = given.on_miss(
        "key",
        (torch.zeros(2),),
        layout,
        known=False,
        graphs=0,
        replays=0,
        make_room=_never,
        device_warmup=_never,
        name="step",
    )
    assert decision.action is Action.CAPTURE


def test_new_keys_that_differ_only_in_a_value_with_no_replay_between_are_churn() -> None:
    calls = Calls(CaptureOptions(warmup_runs=0))
    decisions = [calls.miss((torch.zeros(2), step)) for step in range(CHURN_LIMIT + 1)]
    assert {d.action for d in decisions[:CHURN_LIMIT]} == {Action.CAPTURE}
    churn = decisions[-1]
    assert (churn.action, churn.reason, churn.warning) == (
        Action.GIVE_UP,
        Reason.CHURN,
        CaptureChurnWarning,
    )
    assert "'step'" in churn.message
    assert "argument(s) [1]" in churn.message


def test_a_replay_between_new_keys_or_another_tensor_signature_is_not_churn() -> None:
    calls = Calls(CaptureOptions(warmup_runs=0))
    for step in range(3 * CHURN_LIMIT):
        if step % CHURN_LIMIT == 0:
            calls.replays += 1
        assert calls.miss((torch.zeros(2), step)).action is Action.CAPTURE
    # A new tensor signature every CHURN_LIMIT values is no churn either (replays between
    # them keep the no-replay rule below out of the way).
    shapes = Calls(CaptureOptions(warmup_runs=0))
    for step in range(3 * CHURN_LIMIT):
        if step % CHURN_LIMIT == 0:
            shapes.replays += 1
        size = 2 + step // CHURN_LIMIT
        assert shapes.miss((torch.zeros(size), step)).action is Action.CAPTURE


def test_new_shapes_that_never_replay_stop_costing_captures() -> None:
    # A growing cache or a new length per call: every key new, nothing ever replays. After
    # UNREPLAYED_LIMIT captures new keys run eagerly (once said why), until a graph replays.
    calls = Calls(CaptureOptions(warmup_runs=0))
    decisions = [calls.miss((torch.zeros(2 + n), 0)) for n in range(3 * UNREPLAYED_LIMIT)]
    assert [d.action for d in decisions[:UNREPLAYED_LIMIT]] == [Action.CAPTURE] * UNREPLAYED_LIMIT
    later = decisions[UNREPLAYED_LIMIT:]
    assert {(d.action, d.reason) for d in later} == {(Action.EAGER, Reason.NO_REPLAY)}
    assert "StaticCache" in later[0].message
    assert "capture sizes" in later[0].message
    assert all(d.message == "" for d in later[1:])  # one log line
    # A known key still captures (another call path, a recapture); a replay lifts the rule.
    assert calls.miss((torch.zeros(2), 0), known=True).action is Action.CAPTURE
    calls.replays += 1
    assert calls.miss((torch.zeros(99), 0)).action is Action.CAPTURE


def test_force_recapture_is_never_stopped_for_want_of_replays() -> None:
    calls = Calls(CaptureOptions(warmup_runs=0, force_recapture=True))
    for n in range(2 * UNREPLAYED_LIMIT):
        assert calls.miss((torch.zeros(2 + n), 0)).action is Action.CAPTURE


def test_the_capture_limit_makes_room_first_then_gives_up() -> None:
    calls = Calls(CaptureOptions(warmup_runs=0, capture_limit=2))
    for step in range(2):
        assert calls.miss((torch.zeros(2 + step), 0)).action is Action.CAPTURE
    # At the limit: dead graphs freed one place.
    assert calls.miss((torch.zeros(9), 0), room=1).action is Action.CAPTURE
    full = calls.miss((torch.zeros(10), 0), room=2)
    assert (full.action, full.reason, full.warning) == (
        Action.GIVE_UP,
        Reason.CAPTURE_LIMIT,
        CaptureLimitWarning,
    )
    assert "capture limit of 2 graphs" in full.message


def test_below_the_limit_no_room_is_made() -> None:
    policy = CapturePolicy(CaptureOptions(warmup_runs=0, capture_limit=3))
    layout = Layout((torch.zeros(2),), None, frozen=False, guarded=None)
    decision = policy.on_miss(
        "key",
        (torch.zeros(2),),
        layout,
        known=True,
        graphs=2,
        replays=0,
        make_room=_never,
        device_warmup=_never,
        name="step",
    )
    assert decision.action is Action.CAPTURE


def test_a_failed_capture_runs_the_key_eagerly_until_reset() -> None:
    policy = CapturePolicy(CaptureOptions())
    decision = policy.on_failure("key", RuntimeError("host sync"), "step")
    assert (decision.action, decision.reason) == (Action.EAGER, Reason.CAPTURE_FAILED)
    assert "'step'" in decision.message
    assert "RuntimeError: host sync" in decision.message
    assert "key" in policy.failed
    policy.reset()
    assert not policy.failed


def test_a_failed_capture_under_strict_raises_and_marks_nothing() -> None:
    policy = CapturePolicy(CaptureOptions(strict=True))
    decision = policy.on_failure("key", RuntimeError("host sync"), "step")
    assert decision.action is Action.RAISE
    assert "drop strict=True" in decision.message
    assert not policy.failed


def test_decisions_are_frozen() -> None:
    decision = Decision(Action.CAPTURE, Reason.NEW_GRAPH)
    with pytest.raises(AttributeError):
        decision.action = Action.EAGER  # type: ignore[misc]
