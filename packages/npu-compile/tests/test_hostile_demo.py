"""`npu-compile demo`/`diagnose` refuse a model too large to build, before allocating it."""

from __future__ import annotations

import pytest
import torch
from npu_compile._tools.demo import DEMO_MAX_BYTES, check_demo_size, demo_model_bytes, run_demo
from npu_compile._tools.demo_model import DemoConfig, TinyDecoder
from npu_compile.cli import main


@pytest.mark.parametrize(
    ("argv", "size"),
    [
        (["demo", "--dim", "1000000"], "174.6 TiB"),
        (["demo", "--layers", "100000"], "92.0 GiB"),
        (["diagnose", "--dim", "100000", "--layers", "1"], "447.5 GiB"),
    ],
)
def test_a_huge_demo_model_is_refused_with_its_size(
    argv: list[str],
    size: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_allocation(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was built")

    monkeypatch.setattr(TinyDecoder, "__init__", no_allocation)
    assert main([*argv, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"needs about {size}" in err
    assert "over the demo's limit of 4.0 GiB" in err


def test_the_estimate_matches_the_built_model() -> None:
    config = DemoConfig(layers=3, dim=16, max_seq=40)
    model = TinyDecoder(config)
    tensors = [*model.parameters(), *model.buffers()]
    exact = sum(t.numel() * t.element_size() for t in tensors)
    host = demo_model_bytes(config) - exact
    assert 0 <= host <= 3 * 64 * 1024


def test_run_demo_checks_the_size_first() -> None:
    with pytest.raises(ValueError, match="needs about"):
        run_demo(tokens=2, device=torch.device("cpu"), config=DemoConfig(dim=65536), progress=None)
    check_demo_size(DemoConfig())  # the default demo fits
    assert demo_model_bytes(DemoConfig()) < DEMO_MAX_BYTES // 100
