"""A small decoder-only language model for ``npu-compile demo``, ``diagnose`` and ``bench``.

Random weights from a fixed seed, pre-norm attention + MLP blocks, and a *static* KV cache: one
buffer per layer of shape ``(batch, heads, max_seq, head_dim)`` written in place with
``index_copy_`` at the step's positions. Attention always spans the whole cache with a mask built
from the positions, so every decode step has the same shapes: one captured graph serves them all,
the way serving engines run decode.

It ships with the package so that the commands work from an installed wheel;
``examples/demo_decoder.py`` in the repository is the same model written out for users.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["DemoConfig", "TinyDecoder", "greedy_generate", "PROMPT_LENGTH"]

#: Length of the demo's built-in prompt (:meth:`TinyDecoder.prompt`).
PROMPT_LENGTH = 8


@dataclass(frozen=True)
class DemoConfig:
    """Shape of the demo model.

    Attributes:
        vocab: Vocabulary size.
        dim: Hidden size.
        layers: Decoder blocks.
        heads: Attention heads (``dim`` must divide evenly).
        max_seq: KV cache length (prompt + generated tokens must fit).
        batch: Sequences decoded together.
        seed: Seed of the random weights and prompt.
    """

    vocab: int = 512
    dim: int = 128
    layers: int = 4
    heads: int = 4
    max_seq: int = 128
    batch: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab", "dim", "layers", "heads", "max_seq", "batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"DemoConfig.{name} must be an int >= 1, got {value!r}")
        if self.dim % self.heads:
            raise ValueError(
                f"DemoConfig.dim ({self.dim}) must be a multiple of heads ({self.heads}); "
                f"try dim={max(self.heads, self.dim - self.dim % self.heads)}"
            )


class _Block(nn.Module):
    k_cache: torch.Tensor
    v_cache: torch.Tensor

    def __init__(self, config: DemoConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.head_dim = config.dim // config.heads
        self.norm1 = nn.LayerNorm(config.dim)
        self.qkv = nn.Linear(config.dim, 3 * config.dim, bias=False)
        self.proj = nn.Linear(config.dim, config.dim, bias=False)
        self.norm2 = nn.LayerNorm(config.dim)
        self.up = nn.Linear(config.dim, 4 * config.dim)
        self.down = nn.Linear(4 * config.dim, config.dim)
        cache_shape = (config.batch, config.heads, config.max_seq, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(cache_shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache_shape), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(dim, dim=-1)
        q = q.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        # In-place write into the static cache: the graph keeps it (a MUTATED input), so replays
        # update the caller's cache with no copy.
        self.k_cache.index_copy_(2, positions, k)
        self.v_cache.index_copy_(2, positions, v)
        scores = q @ self.k_cache.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~mask, float("-inf"))
        attention = scores.softmax(dim=-1) @ self.v_cache
        x = x + self.proj(attention.transpose(1, 2).reshape(batch, length, dim))
        out: torch.Tensor = x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))
        return out


class TinyDecoder(nn.Module):
    """The demo decoder: ``forward(tokens, positions) -> logits``.

    Args:
        config: Model shape and seed.
    """

    slots: torch.Tensor
    blocks: nn.ModuleList

    def __init__(self, config: DemoConfig | None = None) -> None:
        super().__init__()
        self.config = config or DemoConfig()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(self.config.seed)
        try:
            self.embed = nn.Embedding(self.config.vocab, self.config.dim)
            self.blocks = nn.ModuleList(_Block(self.config) for _ in range(self.config.layers))
            self.norm = nn.LayerNorm(self.config.dim)
            self.head = nn.Linear(self.config.dim, self.config.vocab, bias=False)
        finally:
            torch.random.set_rng_state(generator_state)
        self.register_buffer("slots", torch.arange(self.config.max_seq), persistent=False)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Run ``tokens`` (``(batch, length)``) at cache ``positions`` (``(length,)``).

        Returns:
            Logits of shape ``(batch, length, vocab)``.
        """
        # Causal mask over the whole static cache: slot s is visible to the token at p iff s <= p.
        mask = (self.slots[None, :] <= positions[:, None])[None, None]
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, positions, mask)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits

    def reset_cache(self) -> None:
        """Zero the KV cache (between two generations)."""
        for block in self.blocks:
            assert isinstance(block, _Block)
            block.k_cache.zero_()
            block.v_cache.zero_()

    def prompt(self, length: int = PROMPT_LENGTH) -> torch.Tensor:
        """A deterministic random prompt of ``length`` tokens on the model's device."""
        generator = torch.Generator().manual_seed(self.config.seed + 1)
        tokens = torch.randint(
            0, self.config.vocab, (self.config.batch, length), generator=generator
        )
        return tokens.to(self.slots.device)

    def decode_step_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(token, position)`` of one decode step right after the prompt, for timing loops.

        The position is fixed, so every call writes the same cache slot: the step can repeat
        forever and gives the same logits each time (what the benchmarks check against).
        """
        token = self.prompt()[:, :1].contiguous()
        position = torch.full((1,), PROMPT_LENGTH, dtype=torch.long, device=self.slots.device)
        return token, position


StepFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def greedy_generate(
    model: TinyDecoder,
    step: StepFn,
    prompt: torch.Tensor,
    new_tokens: int,
    on_token: Callable[[int], None] | None = None,
) -> tuple[torch.Tensor, list[float]]:
    """Generate ``new_tokens`` greedily: one prefill, then one decode step per token.

    Args:
        model: The model (its cache is reset first).
        step: ``model`` itself or a compiled form of it.
        prompt: ``(batch, prompt_len)`` tokens.
        new_tokens: Tokens to generate (the first comes from the prefill).
        on_token: Called with the index of each generated token (progress display).

    Returns:
        ``(tokens (batch, new_tokens), seconds per decode step)``; timings cover decode steps
        only and include a device synchronisation per step.
    """
    import time

    from npu_compile._tools import device as _device

    device = prompt.device
    length = prompt.shape[1]
    if length + new_tokens > model.config.max_seq:
        raise ValueError(
            f"prompt ({length}) + new tokens ({new_tokens}) exceed the KV cache "
            f"({model.config.max_seq}); use fewer tokens or a larger DemoConfig.max_seq"
        )
    model.reset_cache()
    with torch.no_grad():
        logits = step(prompt, torch.arange(length, device=device))
        token = logits[:, -1].argmax(dim=-1, keepdim=True)
        generated = [token]
        if on_token is not None:
            on_token(0)
        timings: list[float] = []
        for index in range(1, new_tokens):
            position = torch.full((1,), length + index - 1, dtype=torch.long, device=device)
            _device.synchronize(device)
            start = time.perf_counter()
            logits = step(token, position)
            token = logits[:, -1].argmax(dim=-1, keepdim=True)
            _device.synchronize(device)
            timings.append(time.perf_counter() - start)
            generated.append(token)
            if on_token is not None:
                on_token(index)
    return torch.cat(generated, dim=1), timings
