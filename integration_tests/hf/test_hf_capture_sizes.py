"""Capture sizes under Hugging Face ``transformers`` models we did not write (tiny, from configs).

Each case broke a naive padding: batch statistics, a graph traced at batch 1, a batch as long as
its prompts, ``generate`` with left padding. Every result must equal eager: logits, generated
tokens, and the state a model keeps.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from typing import Any

import npu_compile
import pytest
import torch
import transformers
from npu_compile import CompilerConfig, get_npu_backend

VOCAB = 64


@pytest.fixture
def serving_shapes() -> Iterator[None]:
    """The README route: a batch of 1 is not specialised into a graph of its own."""
    import torch.fx.experimental._config as fx_config

    with fx_config.patch(backed_size_oblivious=True):
        yield


def _backend(sizes: list[int]) -> npu_compile.NpuBackend:
    config = CompilerConfig()
    config.aclgraph_config.capture_sizes = sizes
    return get_npu_backend(compiler_config=config)


def _llama() -> Any:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _ids(batch: int, length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, length), generator=generator)


def test_hf_resnet_in_training_mode_keeps_eager_logits_and_statistics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = transformers.ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=4
    )
    torch.manual_seed(0)
    model = transformers.ResNetForImageClassification(config).train()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend=_backend([2, 4]))
    with caplog.at_level(logging.INFO, logger="npu_compile"), torch.no_grad():
        for step in range(2):
            npu_compile.mark_step_begin()
            pixels = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(step))
            torch._dynamo.mark_dynamic(pixels, 0)
            got = compiled(pixel_values=pixels).logits
            torch.testing.assert_close(got, reference(pixel_values=pixels).logits)
    for name, buffer in reference.named_buffers():
        torch.testing.assert_close(dict(model.named_buffers())[name], buffer, msg=name)
    assert any("captured per batch size" in r.getMessage() for r in caplog.records)


@pytest.mark.usefixtures("serving_shapes")
def test_an_hf_llama_serving_loop_through_the_readme_route() -> None:
    model = _llama()
    backend = _backend([1, 2, 4])
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for step, batch in enumerate((1, 3, 2, 4, 1)):
            npu_compile.mark_step_begin()
            ids = _ids(batch, 5, step)
            got = compiled(input_ids=ids, use_cache=False).logits
            expected = model(input_ids=ids, use_cache=False).logits
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert backend.stats.fallbacks == []
    # The graph traced at batch 1 holds only there; the other one pads 3 to 4.
    assert sorted(runner.num_graphs for runner in backend.stats.runners) == [1, 2]


@pytest.mark.usefixtures("serving_shapes")
def test_a_first_request_whose_batch_equals_its_length() -> None:
    model = _llama()
    backend = _backend([2, 4])
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for step, batch in enumerate((3, 3, 2, 4)):  # 3 prompts of 3 tokens first
            npu_compile.mark_step_begin()
            ids = _ids(batch, 3, step)
            got = compiled(input_ids=ids, use_cache=False).logits
            expected = model(input_ids=ids, use_cache=False).logits
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert backend.stats.fallbacks == []


def _generate(model: Any, batch: int) -> torch.Tensor:
    """Greedy decoding of ``batch`` prompts, all but the first left-padded by two tokens."""
    ids = _ids(batch, 6, batch)
    mask = torch.ones_like(ids)
    ids[1:, :2] = 0
    mask[1:, :2] = 0
    with torch.no_grad():
        out: torch.Tensor = model.generate(
            ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0
        )
    return out


# None is torch.compile's default: automatic dynamic shapes after a recompile.
@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic"])
def test_hf_generate_with_left_padding(dynamic: bool | None) -> None:
    model = _llama()
    expected = {batch: _generate(model, batch) for batch in (1, 3)}
    backend = _backend([1, 2, 4])
    model.forward = torch.compile(model.forward, backend=backend, dynamic=dynamic)
    for batch in (1, 3):
        assert torch.equal(_generate(model, batch), expected[batch])
    assert backend.stats.fallbacks == []
