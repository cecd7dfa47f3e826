"""The decoder `npu-compile demo` runs, written out: a static KV cache, one graph per decode step.

A small decoder-only language model (random weights from a fixed seed, pre-norm attention + MLP
blocks) whose KV cache is one fixed buffer per layer, written in place with ``index_copy_`` at the
step's positions. Attention spans the whole cache with a mask built from the positions, so every
decode step has the same shapes: one captured graph serves them all, the way serving engines run
decode. The script generates tokens greedily, eagerly and then compiled with npu-compile in
reduce-overhead mode, and exits 1 unless both runs produce the same tokens.

``npu-compile demo`` runs this model from the installed package, with timings and a Host Bound /
Device Bound verdict; this file is the one to read and adapt.

    python examples/demo_decoder.py [--device cpu|cuda|npu] [--tokens 16]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

import npu_compile
import torch
from torch import nn

PROMPT_LENGTH = 8


@dataclass(frozen=True)
class DemoConfig:
    vocab: int = 512
    dim: int = 128
    layers: int = 4
    heads: int = 4
    max_seq: int = 128  # KV cache slots: prompt + generated tokens must fit
    batch: int = 1
    seed: int = 0


class Block(nn.Module):
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
        # In-place writes into the static cache stay inside the captured graph: a replay updates
        # the cache the model holds, with no copy.
        self.k_cache.index_copy_(2, positions, k)
        self.v_cache.index_copy_(2, positions, v)
        scores = q @ self.k_cache.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~mask, float("-inf"))
        attention = scores.softmax(dim=-1) @ self.v_cache
        x = x + self.proj(attention.transpose(1, 2).reshape(batch, length, dim))
        out: torch.Tensor = x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))
        return out


class TinyDecoder(nn.Module):
    """``forward(tokens, positions) -> logits``; the same weights for the same seed."""

    slots: torch.Tensor
    blocks: nn.ModuleList

    def __init__(self, config: DemoConfig | None = None) -> None:
        super().__init__()
        self.config = config or DemoConfig()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(self.config.seed)
        try:
            self.embed = nn.Embedding(self.config.vocab, self.config.dim)
            self.blocks = nn.ModuleList(Block(self.config) for _ in range(self.config.layers))
            self.norm = nn.LayerNorm(self.config.dim)
            self.head = nn.Linear(self.config.dim, self.config.vocab, bias=False)
        finally:
            torch.random.set_rng_state(generator_state)
        self.register_buffer("slots", torch.arange(self.config.max_seq), persistent=False)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # Causal mask over the whole static cache: slot s is visible to the token at p iff s <= p.
        mask = (self.slots[None, :] <= positions[:, None])[None, None]
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, positions, mask)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits

    def reset_cache(self) -> None:
        for block in self.blocks:
            assert isinstance(block, Block)
            block.k_cache.zero_()
            block.v_cache.zero_()

    def prompt(self, length: int = PROMPT_LENGTH) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.config.seed + 1)
        tokens = torch.randint(
            0, self.config.vocab, (self.config.batch, length), generator=generator
        )
        return tokens.to(self.slots.device)


def greedy_generate(
    model: TinyDecoder,
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    prompt: torch.Tensor,
    new_tokens: int,
) -> torch.Tensor:
    """One prefill, then one decode step per token; ``step`` is the model or its compiled form."""
    device = prompt.device
    length = prompt.shape[1]
    model.reset_cache()
    with torch.no_grad():
        logits = step(prompt, torch.arange(length, device=device))  # prefill: its own shape
        token = logits[:, -1].argmax(dim=-1, keepdim=True)
        generated = [token]
        for index in range(1, new_tokens):
            # Every decode step has the same shapes: the graph captured once replays for all.
            position = torch.full((1,), length + index - 1, dtype=torch.long, device=device)
            logits = step(token, position)
            token = logits[:, -1].argmax(dim=-1, keepdim=True)
            generated.append(token)
    return torch.cat(generated, dim=1)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--device", default="cpu", help="where to run: cpu, cuda or npu")
    parser.add_argument("--tokens", type=int, default=16, help="tokens to generate")
    parser.add_argument("--layers", type=int, default=2, help="decoder blocks")
    parser.add_argument("--dim", type=int, default=64, help="hidden size (a multiple of 4)")
    args = parser.parse_args()
    config = DemoConfig(layers=args.layers, dim=args.dim)
    if not 2 <= args.tokens <= config.max_seq - PROMPT_LENGTH:
        parser.error(f"--tokens must be between 2 and {config.max_seq - PROMPT_LENGTH}")

    model = TinyDecoder(config).to(args.device).eval()
    prompt = model.prompt()
    eager = greedy_generate(model, model, prompt, args.tokens)

    backend = npu_compile.get_npu_backend()  # reduce-overhead: captured graphs, replayed
    compiled = torch.compile(model, backend=backend, dynamic=False)
    ours = greedy_generate(model, compiled, prompt, args.tokens)

    print(f"eager:           {eager.tolist()}")
    print(f"reduce-overhead: {ours.tolist()}")
    print(f"graphs captured: {backend.stats.captured}")
    if not torch.equal(eager, ours):
        print("error: reduce-overhead generated different tokens than eager", file=sys.stderr)
        return 1
    if backend.stats.captured == 0:  # everything fell back to eager: the comparison proves nothing
        print(f"error: nothing was captured: {backend.stats.fallbacks}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
