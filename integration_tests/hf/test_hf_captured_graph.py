"""The graph a device captures for plain Hugging Face inference and training equals eager.

The CPU emulation replays the ATen graph after every pass of the backend, as a GPU or NPU
captures it, so these runs check that graph: with and without labels, under ``no_grad`` and with
grad enabled (parameters that require grad, ``train()`` and ``eval()``), and for prompts of
changing length. The tolerance is float rounding: a pass that writes a tensor another op still
reads shows as an error of the order of the values themselves.
"""

from __future__ import annotations

from collections.abc import Callable

import npu_compile
import pytest
import torch
import transformers

from integration_tests.hf._models import VOCAB

_COMMON = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}

FAMILIES: dict[str, Callable[[], torch.nn.Module]] = {
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**_COMMON)),
    "gpt2": lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    ),
    "qwen3": lambda: transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**_COMMON, head_dim=8)),
}


def _model(family: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return FAMILIES[family]()


def _ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(((got - want).abs().max() / want.abs().max()).detach())


@pytest.mark.parametrize("labels", [False, True], ids=["logits", "loss"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_no_grad_inference_equals_eager(family: str, labels: bool) -> None:
    model = _model(family).eval()
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    ids = _ids(2, 7)
    extra = {"labels": ids} if labels else {}
    with torch.no_grad():
        want = model(ids, use_cache=False, **extra)
        for _ in range(3):  # the capture, then replays
            got = compiled(ids, use_cache=False, **extra)
            torch.testing.assert_close(got.logits, want.logits, rtol=1e-6, atol=1e-6)
            if labels:
                torch.testing.assert_close(got.loss, want.loss, rtol=1e-6, atol=1e-6)
    assert backend.stats.captured >= 1
    assert backend.stats.fallbacks == []


# Dynamo itself reads `.grad` of a non-leaf while it traces GPT-2's loss with grad enabled (any
# backend): torch's warning, not one of this backend.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_grad_enabled_forward_equals_eager(family: str, train: bool) -> None:
    model = _model(family).train(train)
    if train:  # the same dropout masks in both runs is not what this checks
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    compiled = torch.compile(model, backend=npu_compile.get_npu_backend())
    ids = _ids(2, 7)
    want = model(ids, labels=ids, use_cache=False)
    got = compiled(ids, labels=ids, use_cache=False)
    assert _relative(got.loss, want.loss) <= 1e-6
    assert _relative(got.logits, want.logits) <= 1e-6
    want.loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    got.loss.backward()
    for name, parameter in model.named_parameters():
        if name in expected:
            assert parameter.grad is not None, name
            torch.testing.assert_close(parameter.grad, expected[name], rtol=1e-5, atol=1e-6)


def test_a_grad_enabled_bert_equals_eager() -> None:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.BertForMaskedLM(config).train()
    compiled = torch.compile(model, backend=npu_compile.get_npu_backend())
    ids = _ids(2, 9)
    want = model(ids, labels=ids)
    got = compiled(ids, labels=ids)
    assert _relative(got.loss, want.loss) <= 1e-6
    assert _relative(got.logits, want.logits) <= 1e-6


def test_prompts_of_changing_length_equal_eager() -> None:
    # The position-id code of the mask subtracts two overlapping slices of one tensor: written
    # in place, the subtraction reads elements it has already overwritten.
    model = _model("llama").eval()
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for length in (5, 7, 3, 9, 5):
            ids = _ids(2, length, seed=length)
            torch.testing.assert_close(
                compiled(ids, use_cache=False).logits,
                model(ids, use_cache=False).logits,
                rtol=1e-6,
                atol=1e-6,
            )
    assert backend.stats.fallbacks == []


def test_mixtral_with_its_routing_split_into_pieces_equals_eager() -> None:
    torch.manual_seed(0)
    config = transformers.MixtralConfig(**_COMMON, num_local_experts=4, num_experts_per_tok=2)
    model = transformers.MixtralForCausalLM(config).eval()
    compile_config = npu_compile.CompilerConfig()
    compile_config.aclgraph_config.splitting_ops = ["aten::topk"]  # the router's choice
    backend = npu_compile.get_npu_backend(compiler_config=compile_config)
    compiled = torch.compile(model, backend=backend)
    ids = _ids(2, 7)
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        for _ in range(3):
            got = compiled(ids, use_cache=False).logits
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert backend.stats.pieces >= 2
    assert backend.stats.fallbacks == []
