"""Tiny Hugging Face models built from configs (never downloaded), shared by the client tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import transformers

VOCAB = 96

_COMMON: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}

CONFIGS: dict[str, Callable[[], transformers.PretrainedConfig]] = {
    "gpt2": lambda: transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64
    ),
    "llama": lambda: transformers.LlamaConfig(**_COMMON),
    "qwen2": lambda: transformers.Qwen2Config(**_COMMON),
    "mistral": lambda: transformers.MistralConfig(**_COMMON, sliding_window=None),
    "phi3": lambda: transformers.Phi3Config(**_COMMON, pad_token_id=0),
    "gemma2": lambda: transformers.Gemma2Config(**_COMMON, head_dim=8, sliding_window=8),
    "opt": lambda: transformers.OPTConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        ffn_dim=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        word_embed_proj_dim=32,
    ),
}

DECODERS = tuple(CONFIGS)


def decoder(name: str, seed: int = 0) -> torch.nn.Module:
    """A tiny causal LM with random weights, in eval mode."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[name]())
    return model.eval()


def encoder(seed: int = 0) -> torch.nn.Module:
    """A tiny BERT encoder with random weights, in eval mode."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    return transformers.BertModel(config).eval()


def prompt(seed: int, length: int = 6) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (1, length), generator=generator)


def generate(model: torch.nn.Module, ids: torch.Tensor, tokens: int = 8) -> torch.Tensor:
    """Greedy decoding with a static KV cache."""
    with torch.no_grad():
        out: torch.Tensor = model.generate(  # type: ignore[operator]
            ids,
            max_new_tokens=tokens,
            do_sample=False,
            cache_implementation="static",
            pad_token_id=0,
        )
    return out


def static_cache(model: torch.nn.Module, length: int = 32) -> transformers.StaticCache:
    return transformers.StaticCache(config=model.config, max_cache_len=length)


def cache_argument(model: torch.nn.Module) -> str:
    """The name ``forward`` takes the cache by.

    ``cache`` in newer transformers (5.24 still accepts ``past_key_values``, with a
    FutureWarning), ``past_key_values`` before.
    """
    import inspect

    parameters = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


class Request:
    """One greedy decode driven by hand through ``forward`` with its own ``StaticCache``."""

    def __init__(self, model: torch.nn.Module, ids: torch.Tensor, cache_len: int = 32) -> None:
        self.cache = static_cache(model, cache_len)
        self.cache_argument = cache_argument(model)
        self.ids = ids
        self.tokens: list[torch.Tensor] = []

    def step(self, forward: Callable[..., Any]) -> None:
        if not self.tokens:
            ids, start = self.ids, 0
        else:
            ids, start = self.tokens[-1][:, None], self.ids.shape[1] + len(self.tokens) - 1
        position = torch.arange(start, start + ids.shape[1])
        cache = {self.cache_argument: self.cache}
        out = forward(input_ids=ids, cache_position=position, use_cache=True, **cache)
        self.tokens.append(out.logits[:, -1].argmax(-1))

    def result(self) -> torch.Tensor:
        return torch.cat(self.tokens)


def decode(forward: Callable[..., Any], model: torch.nn.Module, ids: torch.Tensor, n: int) -> Any:
    request = Request(model, ids)
    with torch.no_grad():
        for _ in range(n):
            request.step(forward)
    return request.result()
