"""Two small decoders in plain PyTorch (GPT-2 style and Llama style) shared by the export tests."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 64


class GPT2Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp_proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(dim, dim=2)
        shape = (batch, seq, self.heads, dim // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(batch, seq, dim))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """Token + learned position embeddings, pre-LN blocks with SDPA(is_causal), tied-free head."""

    def __init__(self, dim: int = 32, heads: int = 4, layers: int = 2, max_len: int = 16) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, dim)
        self.wpe = nn.Embedding(max_len, dim)
        self.h = nn.ModuleList(GPT2Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.input_layernorm = RMSNorm(dim)
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.post_attention_layernorm = RMSNorm(dim)
        self.gate_proj = nn.Linear(dim, 2 * dim, bias=False)
        self.up_proj = nn.Linear(dim, 2 * dim, bias=False)
        self.down_proj = nn.Linear(2 * dim, dim, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        batch, seq, dim = x.shape
        head_dim = dim // self.heads
        h = self.input_layernorm(x)
        shape = (batch, seq, self.heads, head_dim)
        q = self.q_proj(h).view(shape).transpose(1, 2)
        k = self.k_proj(h).view(shape).transpose(1, 2)
        v = self.v_proj(h).view(shape).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(head_dim)
        scores = scores.masked_fill(mask, float("-inf"))
        y = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
        x = x + self.o_proj(y.transpose(1, 2).reshape(batch, seq, dim))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    """RMSNorm, rotary embeddings from cached cos/sin buffers, explicit causal mask, SwiGLU MLP."""

    def __init__(self, dim: int = 32, heads: int = 4, layers: int = 2, max_len: int = 16) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, dim)
        self.layers = nn.ModuleList(LlamaLayer(dim, heads) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, VOCAB, bias=False)
        head_dim = dim // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(max_len).float(), inv_freq)
        angles = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", angles.cos(), persistent=False)
        self.register_buffer("sin_cached", angles.sin(), persistent=False)
        causal = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        seq = idx.shape[1]
        x = self.embed_tokens(idx)
        cos, sin = self.cos_cached[:seq], self.sin_cached[:seq]
        mask = ~self.causal[:seq, :seq]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


DECODERS: dict[str, Callable[[], nn.Module]] = {"gpt2": GPT2, "llama": Llama}


def make_decoder(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return DECODERS[name]().eval()


def tokens(batch: int, seq: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, seq), generator=generator)


@pytest.fixture(scope="session")
def decoder_exports(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, bool], Path]:
    """Export each (decoder, dynamic) pair once per session; returns its export directory."""
    from npu_graph_export import ExportConfig, dynamo_export

    cache: dict[tuple[str, bool], Path] = {}

    def get(name: str, dynamic: bool) -> Path:
        key = (name, dynamic)
        if key not in cache:
            path = tmp_path_factory.mktemp(f"{name}-{'dynamic' if dynamic else 'static'}")
            dynamo_export(
                tokens(2, 8),
                model=make_decoder(name),
                export_path=path,
                dynamic=dynamic,
                config=ExportConfig(enable_record_nn_module_stack=True),
            )
            cache[key] = path
        return cache[key]

    return get


@pytest.fixture
def decoder() -> Callable[..., nn.Module]:
    return make_decoder


@pytest.fixture
def make_tokens() -> Callable[..., torch.Tensor]:
    return tokens
