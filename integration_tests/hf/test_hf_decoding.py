"""Hugging Face ``transformers`` decoders and an encoder under the npu_compile backend.

Client code we did not write: tiny models built from configs, decoded with ``generate`` and with
hand-written ``StaticCache`` loops. Every result must equal eager token for token.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from npu_compile import CompilerConfig, get_npu_backend

from integration_tests._static_kernels import static_kernel_config
from integration_tests.hf._models import (
    DECODERS,
    Request,
    decode,
    decoder,
    encoder,
    generate,
    prompt,
)

TOKENS = 8


@pytest.fixture(autouse=True)
def _no_fallback_warnings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="npu_compile")


def _fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "npu_compile"]


# dynamic=None is torch.compile's default (automatic dynamic after a recompile).
@pytest.mark.parametrize("dynamic", [None, True], ids=["default", "dynamic"])
@pytest.mark.parametrize("name", DECODERS)
def test_generate_with_a_static_cache_matches_eager(
    name: str, dynamic: bool | None, caplog: pytest.LogCaptureFixture
) -> None:
    model = decoder(name)
    ids = prompt(1)
    expected = generate(model, ids, TOKENS)
    backend = get_npu_backend()
    model.forward = torch.compile(model.forward, backend=backend, dynamic=dynamic)
    assert torch.equal(generate(model, ids, TOKENS), expected)
    assert backend.stats.fallbacks == []
    assert _fallbacks(caplog) == []
    replays = sum(r.counters.replays for r in backend.stats.runners)
    assert replays > 0


# A StaticCache allocates its tensors at its first update: a compiled prefill returns them as
# graph outputs. Each call begins a new step by default, so the next request's prefill (the same
# graph) may take them back: decode in turn either keeps held outputs, or runs the prefill
# eagerly, as transformers advises for graph capture ("prefill should never be compiled").
IN_TURN = ["keep_held_outputs", "eager_prefill"]


def _in_turn_backend(mode: str) -> Any:
    config = CompilerConfig()
    config.debug.aclgraph.keep_held_outputs = mode == "keep_held_outputs"
    return get_npu_backend(compiler_config=config)


def _step(request: Request, model: torch.nn.Module, compiled: Any, mode: str) -> None:
    eager = mode == "eager_prefill" and not request.tokens
    request.step(model.forward if eager else compiled)


@pytest.mark.parametrize("mode", IN_TURN)
@pytest.mark.parametrize("name", DECODERS)
def test_two_static_cache_loops_decoded_in_turn(name: str, mode: str) -> None:
    model = decoder(name)
    prompts = [prompt(2), prompt(3)]
    expected = [decode(model.forward, model, ids, TOKENS) for ids in prompts]
    compiled = torch.compile(model.forward, backend=_in_turn_backend(mode))
    requests = [Request(model, ids) for ids in prompts]
    with torch.no_grad():
        for _ in range(TOKENS):
            for request in requests:
                _step(request, model, compiled, mode)
    for request, tokens in zip(requests, expected, strict=True):
        assert torch.equal(request.result(), tokens)


@pytest.mark.parametrize("mode", IN_TURN)
def test_two_model_instances_decoded_in_turn(mode: str) -> None:
    models = [decoder("llama", seed=0), decoder("llama", seed=1)]
    ids = prompt(4)
    expected = [decode(m.forward, m, ids, TOKENS) for m in models]
    backend = _in_turn_backend(mode)
    compiled = [torch.compile(m.forward, backend=backend) for m in models]
    requests = [Request(m, ids) for m in models]
    with torch.no_grad():
        for _ in range(TOKENS):
            for request, model, forward in zip(requests, models, compiled, strict=True):
                _step(request, model, forward, mode)
    for request, tokens in zip(requests, expected, strict=True):
        assert torch.equal(request.result(), tokens)


def test_gemma_sliding_window_cache_replays_its_decode_steps() -> None:
    model = decoder("gemma2")
    ids = prompt(5)
    steps = 24
    expected = decode(model.forward, model, ids, steps)
    backend = get_npu_backend()
    compiled = torch.compile(model.forward, backend=backend)
    assert torch.equal(decode(compiled, model, ids, steps), expected)
    replays = sum(r.counters.replays for r in backend.stats.runners)
    assert replays >= 0.9 * (steps - 1)


def test_bert_encoder_matches_eager() -> None:
    model = encoder()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for length in (5, 5, 7, 5, 5, 7):
            ids = prompt(length, length)
            mask = torch.ones_like(ids)
            expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
            got = compiled(input_ids=ids, attention_mask=mask).last_hidden_state
            torch.testing.assert_close(got, expected)
            del got  # done with it: the next call may replay in place
    assert sum(r.counters.replays for r in backend.stats.runners) > 0


def test_bert_encoder_dynamic_has_no_fallback(caplog: pytest.LogCaptureFixture) -> None:
    model = encoder()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for length in (1, 3, 1):
            ids = prompt(length, length)
            expected = model(input_ids=ids).last_hidden_state
            torch.testing.assert_close(compiled(input_ids=ids).last_hidden_state, expected)
    assert backend.stats.fallbacks == []
    assert _fallbacks(caplog) == []


def _static_kernel_backend(build_dir: Path) -> Any:
    return get_npu_backend(compiler_config=static_kernel_config(build_dir))


def _static_kernel_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "npu_static_kernel"]


def test_generate_with_static_kernels_keeps_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # transformers' static cache advances a position counter in place on every forward: the
    # check run of a new artifact must see the counter as the call had it, not as the op
    # recording left it, or it writes past the cache and the kernels are thrown away.
    caplog.set_level(logging.WARNING, logger="npu_static_kernel")
    model = decoder("llama")
    ids = prompt(1)
    expected = generate(model, ids, 4)
    backend = _static_kernel_backend(tmp_path)
    model.forward = torch.compile(model.forward, backend=backend, dynamic=False)
    assert torch.equal(generate(model, ids, 4), expected)
    assert backend.stats.fallbacks == []
    assert _static_kernel_warnings(caplog) == []
    assert len(list((tmp_path / "static_kernel_cache" / "entries").iterdir())) == 2


def test_decode_under_inference_mode_with_static_kernels(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Serving code decodes under torch.inference_mode(): the kernels are built for its tensors.
    caplog.set_level(logging.WARNING, logger="npu_static_kernel")
    model = decoder("qwen2")
    ids = prompt(6)
    with torch.inference_mode():
        expected = decode(model.forward, model, ids, 4)
    backend = _static_kernel_backend(tmp_path)
    compiled = torch.compile(model.forward, backend=backend)
    with torch.inference_mode():
        assert torch.equal(decode(compiled, model, ids, 4), expected)
    assert backend.stats.fallbacks == []
    assert _static_kernel_warnings(caplog) == []
    assert sum(r.counters.replays for r in backend.stats.runners) > 0
