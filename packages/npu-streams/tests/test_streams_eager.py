"""Eager behaviour: CPU no-op semantics, tag rules, real switching against a fake accelerator."""

from __future__ import annotations

import gc
from typing import Any

import npu_streams
import pytest
import torch
from npu_streams import (
    EventTagError,
    StreamScopeError,
    StreamTagError,
    current_stream_tag,
    npu_create_tagged_event,
    npu_record_tagged_stream,
    npu_stream_switch,
    npu_tagged_event_record,
    npu_tagged_event_wait,
)

# ---- CPU: no device work, program order and bookkeeping kept ------------------------------------


def test_scopes_nest_and_restore_the_tag_on_cpu() -> None:
    seen = [current_stream_tag()]
    with npu_stream_switch("1"):
        seen.append(current_stream_tag())
        with npu_stream_switch("2", stream_priority=-1):
            seen.append(current_stream_tag())
        seen.append(current_stream_tag())
    seen.append(current_stream_tag())
    assert seen == ["default", "1", "2", "1", "default"]


def test_scope_is_left_when_the_body_raises() -> None:
    with pytest.raises(KeyError), npu_stream_switch("1"):
        raise KeyError("boom")
    assert current_stream_tag() == "default"


def test_cpu_results_equal_the_same_code_without_streams(seed_model: Any) -> None:
    torch.manual_seed(0)
    inputs = [torch.randn(8, 8) for _ in range(4)]
    outputs = seed_model()(*inputs)
    in1, in2, in3, in4 = inputs
    expected = (in1 + in2, in3 @ in4, in3 @ in4, in3 + in4, torch.full((8, 8), 3.0))
    for got, want in zip(outputs, expected, strict=True):
        torch.testing.assert_close(got, want)


def test_record_tagged_stream_on_cpu_leaves_the_tensor_alone() -> None:
    tensor = torch.arange(4.0)
    npu_record_tagged_stream(tensor, "1")
    npu_record_tagged_stream(tensor, "default")
    assert tensor.tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("tag", ["", 1, None])
def test_bad_stream_tag_says_what_to_pass(tag: Any) -> None:
    with pytest.raises(StreamTagError, match="non-empty string"):
        npu_stream_switch(tag)
    with pytest.raises(ValueError, match="non-empty string"):
        npu_record_tagged_stream(torch.ones(1), tag)


@pytest.mark.parametrize("priority", [1.5, True, "0"])
def test_bad_priority_says_what_to_pass(priority: Any) -> None:
    with pytest.raises(StreamTagError, match="stream_priority must be an int"):
        npu_stream_switch("1", stream_priority=priority)


def test_closing_a_scope_out_of_order_is_an_error() -> None:
    torch.ops.npu_streams.stream_enter("a", "0")
    try:
        with pytest.raises(StreamScopeError, match="innermost open scope on this thread is 'a'"):
            torch.ops.npu_streams.stream_exit("b")
    finally:
        torch.ops.npu_streams.stream_exit("a")
    with pytest.raises(StreamScopeError, match="innermost open scope on this thread is None"):
        torch.ops.npu_streams.stream_exit("a")


# ---- tagged events ---------------------------------------------------------------------------


def test_duplicate_live_tag_is_an_error_naming_the_tag_and_the_fix() -> None:
    first = npu_create_tagged_event("66")
    with pytest.raises(EventTagError, match="'66' already exists") as info:
        npu_create_tagged_event("66")
    assert isinstance(info.value, ValueError)
    assert info.value.code == "event-tag"
    assert "reset_tagged_events" in str(info.value)
    assert first.tag == "66"


def test_tag_is_free_again_once_its_event_is_gone(seed_model: Any) -> None:
    model = seed_model()
    with pytest.raises(EventTagError):
        seed_model()
    del model
    gc.collect()
    second = seed_model()
    assert second.tagged_event1.tag == "66"


def test_reset_frees_tags_and_forgotten_events_fail_clearly() -> None:
    event = npu_create_tagged_event("66")
    npu_streams.reset_tagged_events()
    again = npu_create_tagged_event("66")
    assert again is not event
    npu_streams.reset_tagged_events()
    with pytest.raises(EventTagError, match=r"cannot record tagged event '66'.*npu_create_tagged"):
        npu_tagged_event_record(event)
    with pytest.raises(EventTagError, match="cannot wait on tagged event '66'"):
        npu_tagged_event_wait(event)


def test_unknown_tag_through_the_op_is_an_error() -> None:
    with pytest.raises(EventTagError, match="no live event has this tag"):
        torch.ops.npu_streams.tagged_event_wait("never-created")


def test_record_of_a_non_tagged_event_says_what_to_create() -> None:
    with pytest.raises(EventTagError, match="npu_create_tagged_event"):
        npu_tagged_event_record(torch.Event())  # type: ignore[arg-type]


def test_event_tag_must_be_a_string() -> None:
    with pytest.raises(EventTagError, match="non-empty string"):
        npu_create_tagged_event("")


# ---- fake accelerator: the switching logic itself ----------------------------------------------


def test_scope_switches_to_the_tagged_stream_and_back(fake_device: Any) -> None:
    with npu_stream_switch("1"):
        inside = fake_device.current
        with npu_stream_switch("2", stream_priority=-1):
            nested = fake_device.current
            with npu_stream_switch("default"):
                main_again = fake_device.current
        with npu_stream_switch("1"):
            same_tag = fake_device.current
    assert fake_device.current.name == "main"
    assert [inside.name, nested.name, main_again.name, same_tag.name] == [
        "side0",
        "side1",
        "main",
        "side0",
    ]
    assert nested.priority == -1
    assert len(fake_device.streams) == 2  # one stream per tag, reused


def test_one_tag_cannot_have_two_priorities(fake_device: Any) -> None:
    with npu_stream_switch("1", stream_priority=-1):
        pass
    with pytest.raises(StreamTagError, match="already exists with priority -1"):  # noqa: SIM117
        with npu_stream_switch("1", stream_priority=0):
            pass
    assert current_stream_tag() == "default"


def test_events_record_and_wait_on_the_current_stream(fake_device: Any) -> None:
    event = npu_create_tagged_event("66")
    npu_tagged_event_record(event)
    with npu_stream_switch("1"):
        npu_tagged_event_wait(event)
    assert fake_device.log == [
        ("record", "ev0", "main"),
        ("set_stream", "side0"),
        ("wait", "ev0", "side0"),
        ("set_stream", "main"),
    ]
    assert event.device_event(fake_device.device).name == "ev0"


def test_record_stream_shares_the_scope_registry(fake_device: Any) -> None:
    tensor = torch.ones(2)
    npu_record_tagged_stream(tensor, "7")  # creates stream "7" before any scope uses it
    with npu_stream_switch("7"):
        stream_in_scope = fake_device.current
        npu_record_tagged_stream(tensor, "default")
    assert stream_in_scope.name == "side0"
    assert fake_device.log == [
        ("record_stream", "side0"),
        ("set_stream", "side0"),
        ("record_stream", "main"),
        ("set_stream", "main"),
    ]


def test_scopes_are_per_thread_like_the_current_stream() -> None:
    import threading

    seen: list[str] = []
    with npu_stream_switch("a"):
        worker = threading.Thread(target=lambda: seen.append(current_stream_tag()))
        worker.start()
        worker.join()
        seen.append(current_stream_tag())
    assert seen == ["default", "a"]


def test_scopes_a_failed_graph_left_open_are_closed(fake_device: Any) -> None:
    # A compiled graph opens and closes a scope with ops and no `finally`: an exception in
    # between used to leave the side stream current and the scope on the stack.
    def failing_graph() -> None:
        with npu_streams.scopes_closed_on_error():
            torch.ops.npu_streams.stream_enter("side", "0")
            assert fake_device.current.name == "side0"
            raise ValueError("an op of the graph failed")

    with pytest.raises(ValueError, match="an op of the graph failed"):
        failing_graph()
    assert fake_device.current.name == "main"
    assert npu_streams.current_stream_tag() == "default"
    with npu_streams.scopes_closed_on_error():  # a normal exit leaves open scopes alone
        torch.ops.npu_streams.stream_enter("side", "0")
    assert npu_streams.current_stream_tag() == "side"
    torch.ops.npu_streams.stream_exit("side")
