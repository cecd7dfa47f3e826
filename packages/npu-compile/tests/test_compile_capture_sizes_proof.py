"""Capture sizes pad only what is proven row by row; everything else is captured per size.

Each model here gives wrong numbers, changes the caller's state more than once, or fails when it
is padded naively. Every one must give eager's numbers and state.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator

import npu_compile
import pytest
import torch
from npu_compile import CompilerConfig, get_npu_backend


@pytest.fixture(autouse=True)
def no_size_one_specialisation() -> Iterator[None]:
    import torch.fx.experimental._config as fx_config

    with fx_config.patch(backed_size_oblivious=True):
        yield


def _backend(sizes: list[int], **aclgraph: object) -> npu_compile.NpuBackend:
    config = CompilerConfig()
    config.aclgraph_config.capture_sizes = sizes
    for name, value in aclgraph.items():
        setattr(config.aclgraph_config, name, value)
    return get_npu_backend(compiler_config=config)


def _not_padded(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "captured per batch size" in r.getMessage()]


@pytest.mark.parametrize(
    ("running_stats", "reason"),
    [(True, "updates the graph input"), (False, "computes batch statistics")],
    ids=["running-stats", "batch-stats-only"],
)
def test_batch_norm_in_training_mode_keeps_eager_numbers_and_statistics(
    running_stats: bool, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    norm = torch.nn.BatchNorm1d(8, track_running_stats=running_stats)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), norm).train()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend=_backend([2, 4]), dynamic=True)
    with caplog.at_level(logging.INFO, logger="npu_compile"), torch.no_grad():
        for _ in range(2):
            npu_compile.mark_step_begin()
            x = torch.randn(3, 8)
            torch.testing.assert_close(compiled(x), reference(x))
    for name, buffer in reference.named_buffers():
        torch.testing.assert_close(dict(model.named_buffers())[name], buffer)
    (line,) = _not_padded(caplog)
    assert reason in line
    assert "batch_norm" in line or "copy_" in line  # the node and op that stop the padding


class _Counter(torch.nn.Module):
    """Counts its calls in a buffer, as a step counter or a cache position does."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("n", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.n += 1
        return self.linear(x) * 2


def test_a_buffer_update_applies_once_per_call() -> None:
    model = _Counter()
    compiled = torch.compile(model, backend=_backend([1, 2, 4]), dynamic=True)
    with torch.no_grad():
        x = torch.randn(3, 4)
        torch.testing.assert_close(compiled(x), model.linear(x) * 2)
        assert int(model.n) == 1
        for calls, batch in enumerate((2, 3, 1), start=2):
            npu_compile.mark_step_begin()
            compiled(torch.randn(batch, 4))
            assert int(model.n) == calls


ALONG_THE_BATCH: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "flip": lambda h: h.flip(0),
    "roll": lambda h: h.roll(1, 0),
    "last_row": lambda h: h[-1],
    "cumsum": lambda h: h.cumsum(0),
}


@pytest.mark.parametrize("op", sorted(ALONG_THE_BATCH))
def test_an_op_along_the_batch_is_captured_per_size(
    op: str, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 8)

    def model(x: torch.Tensor) -> torch.Tensor:
        return ALONG_THE_BATCH[op](linear(x)) + 1

    backend = _backend([2, 4])
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with caplog.at_level(logging.INFO, logger="npu_compile"), torch.no_grad():
        for batch in (3, 2, 3):
            npu_compile.mark_step_begin()
            x = torch.randn(batch, 8)
            torch.testing.assert_close(compiled(x), model(x))
    assert len(_not_padded(caplog)) == 1
    assert backend.stats.fallbacks == []


def _arange_rows(x: torch.Tensor) -> torch.Tensor:
    # The graph traced at batch 1 skips the expand: it holds only for a batch of 1.
    p = torch.arange(4.0).unsqueeze(0)
    if x.shape[0] != p.shape[0]:
        p = p.expand(x.shape[0], -1)
    return x + p[torch.arange(x.shape[0])]


def test_a_graph_traced_at_batch_one_runs_only_at_batch_one() -> None:
    backend = _backend([1, 2, 4])
    compiled = torch.compile(_arange_rows, backend=backend, dynamic=True)
    with torch.no_grad():
        for batch in (1, 3, 2, 4, 1):
            npu_compile.mark_step_begin()
            x = torch.randn(batch, 4)
            torch.testing.assert_close(compiled(x), _arange_rows(x))
    assert backend.stats.fallbacks == []
    graphs = sorted(runner.num_graphs for runner in backend.stats.runners)
    assert graphs == [1, 2]  # batch 1 alone; 3, 2 and 4 padded to 2 and 4


def test_a_batch_equal_to_another_size_is_not_padded(caplog: pytest.LogCaptureFixture) -> None:
    def model(x: torch.Tensor) -> torch.Tensor:
        return x.softmax(-1) * 2

    backend = _backend([2, 4])
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with caplog.at_level(logging.INFO, logger="npu_compile"), torch.no_grad():
        for shape in ((3, 3), (3, 5), (2, 5)):
            npu_compile.mark_step_begin()
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), model(x))
    (line,) = _not_padded(caplog)
    assert "also the size of dimension 1" in line
    square, padded = backend.stats.runners
    assert (square.num_graphs, padded.num_graphs) == (1, 2)


def test_the_marked_dimension_is_the_batch() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 8)

    def model(scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # Sequence first: dimension 0 is the sequence, the batch is dimension 1.
        return linear(x) * scale[:, None, None]

    backend = _backend([2, 4])
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for batch in (3, 1, 2):
            npu_compile.mark_step_begin()
            scale, x = torch.randn(5), torch.randn(5, batch, 8)
            torch._dynamo.mark_dynamic(x, 1)
            torch.testing.assert_close(compiled(scale, x), model(scale, x))
    (runner,) = backend.stats.runners
    assert runner.num_graphs == 2


def test_capture_sizes_dim_names_the_batch() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 8)
    backend = _backend([2, 4], capture_sizes_dim=1)
    compiled = torch.compile(linear, backend=backend, dynamic=True)
    with torch.no_grad():
        for batch in (3, 1, 4, 2):
            npu_compile.mark_step_begin()
            x = torch.randn(5, batch, 8)
            torch.testing.assert_close(compiled(x), linear(x))
    (runner,) = backend.stats.runners
    assert runner.num_graphs == 2


def test_a_size_of_the_batch_used_as_a_value_is_not_padded() -> None:
    def model(x: torch.Tensor) -> torch.Tensor:
        return x * x.shape[0]

    backend = _backend([2, 4])
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for batch in (3, 2):
            x = torch.randn(batch, 4)
            torch.testing.assert_close(compiled(x), model(x))
    (runner,) = backend.stats.runners
    assert runner.num_graphs == 2
