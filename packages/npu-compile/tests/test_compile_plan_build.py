"""Plan, then build: a graph saved by torch's AOT compile is built from its saved plan.

The process that loads a graph (vLLM's compile cache after a restart) must run it as the process
that compiled it decided: nothing is planned again, and a decision the planner made (here: no
piece is worth capturing around a split, so the graph runs eagerly) is the one that is built.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import npu_compile
import pytest
import torch
from npu_compile import FallbackReason, _planner
from npu_compile.backend import loaded_stats


def _block(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x * 2.0, dim=-1) + 1.0


def _save(
    config: npu_compile.CompilerConfig,
    x: torch.Tensor,
    path: Path,
    fn: Callable[[torch.Tensor], torch.Tensor] = _block,
) -> npu_compile.NpuBackend:
    backend = npu_compile.get_npu_backend(compiler_config=config)
    with torch._dynamo.config.patch(enable_aot_compile=True), torch.no_grad():
        compiled = torch.compile(fn, backend=backend, fullgraph=True)
        saved = compiled.aot_compile(((x,), {}))
    saved.save_compiled_function(str(path))
    return backend


def _load(path: Path) -> Callable[..., Any]:
    # The graphs are built while loading (the artifact's post_compile).
    with path.open("rb") as f:
        return torch.compiler.load_compiled_function(f, f_globals=globals())


def _never_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> object:
        raise AssertionError("a loaded graph was planned again")

    monkeypatch.setattr(_planner, "plan_graph", refuse)


@pytest.mark.usefixtures("fresh_dynamo")
def test_a_loaded_graph_is_built_from_its_saved_plan(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    x = torch.randn(4, 8)
    config = npu_compile.CompilerConfig()
    backend = _save(config, x, tmp_path / "block.aot")
    assert backend.stats.captured == 1
    _never_planned(monkeypatch)
    runners_before = loaded_stats.captured
    loaded = _load(tmp_path / "block.aot")
    with torch.no_grad():
        for _ in range(3):
            y = torch.randn(4, 8)
            torch.testing.assert_close(loaded(y), _block(y))
    assert loaded_stats.captured == runners_before + 1


@pytest.mark.usefixtures("fresh_dynamo")
def test_a_graph_with_no_piece_worth_capturing_stays_eager_after_a_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Every op of the graph is named in splitting_ops: no piece is left worth a graph.
    x = torch.randn(4, 8)
    config = npu_compile.CompilerConfig()
    config.aclgraph_config.splitting_ops = ["aten::_softmax", "aten::mul", "aten::add"]
    backend = _save(config, x, tmp_path / "block.aot")
    assert backend.stats.fallback_reasons, "the planner should have found nothing to capture"
    assert set(backend.stats.fallback_reasons.values()) == {FallbackReason.SPLITTING_OPS}
    _never_planned(monkeypatch)
    captured, fallbacks = loaded_stats.captured, len(loaded_stats.fallbacks)
    loaded = _load(tmp_path / "block.aot")
    with torch.no_grad():
        y = torch.randn(4, 8)
        torch.testing.assert_close(loaded(y), _block(y))
    # Built as planned: the loaded graph runs eagerly for the same reason, nothing captured.
    assert loaded_stats.captured == captured
    assert len(loaded_stats.fallbacks) == fallbacks + 1


def _split_block(x: torch.Tensor) -> torch.Tensor:
    # Split at the softmax: a piece that computes (the mul) before it, and after it a piece of
    # views alone, which is not worth a graph.
    return torch.softmax(x * 2.0, dim=-1).t().unsqueeze(0)


@pytest.mark.usefixtures("fresh_dynamo")
def test_the_pieces_a_plan_captures_are_built_without_being_chosen_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from npu_compile import _piecewise

    x = torch.randn(4, 8)
    config = npu_compile.CompilerConfig()
    config.aclgraph_config.splitting_ops = ["aten::_softmax"]
    backend = _save(config, x, tmp_path / "split.aot", _split_block)
    assert (backend.stats.piecewise, backend.stats.pieces) == (1, 1)

    def refuse(*args: object) -> bool:
        raise AssertionError("a loaded graph chose its pieces again")

    _never_planned(monkeypatch)
    monkeypatch.setattr(_piecewise, "_worth_capturing", refuse)
    pieces = loaded_stats.pieces
    loaded = _load(tmp_path / "split.aot")
    with torch.no_grad():
        for _ in range(3):
            y = torch.randn(4, 8)
            torch.testing.assert_close(loaded(y), _split_block(y))
    assert loaded_stats.pieces == pieces + 1  # the one piece the plan chose
