"""The workloads of ``host_path.py``: small models whose device work is nothing next to the host's.

Each workload makes a fresh model (the same weights every time) and the arguments of one call,
and says how it is compiled: the ``torch.compile`` options and the ``CompilerConfig`` of
npu_compile. Caches are buffers updated in place: the tensors npu_compile (and the runner rows)
treat as MUTATED inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import npu_compile
import torch
from torch import nn

__all__ = ["PADDED_BATCH", "PADDED_SIZES", "WORKLOADS", "Workload", "statics_and_caches"]


@dataclass(frozen=True)
class Workload:
    """One host-path workload.

    Attributes:
        name: Its name on the command line and in the tables.
        what: One line for the table: the model and the call.
        make: A fresh model (same weights on every call) and the arguments of one call.
        graphs: The FX graphs one call runs (graph breaks make more than one).
        dynamic: ``torch.compile``'s ``dynamic`` for every compiled row.
        config: What npu_compile's rows set on a fresh ``CompilerConfig``.
        padded: Whether npu_compile pads the call's batch up to a capture size.
        held: Whether each call's output is held into the next call (``out = f(x)``), as in
            every loop that keeps its result; otherwise the output is dropped at once.
    """

    name: str
    what: str
    make: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
    graphs: int = 1
    dynamic: bool | None = None
    config: Callable[[npu_compile.CompilerConfig], None] = field(default=lambda config: None)
    padded: bool = False
    held: bool = False

    def compiler_config(self) -> npu_compile.CompilerConfig:
        config = npu_compile.CompilerConfig()
        self.config(config)
        return config


class MLP(nn.Module):
    """Linear 16→32, ReLU, Linear 32→16.

    A class of its own, not an ``nn.Sequential``: each compiled row copies its ``forward`` to
    have a Dynamo cache of its own, which a forward in torch's own files does not give.
    """

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down(torch.relu(self.up(x)))
        return out


def _mlp() -> nn.Module:
    return MLP()


def make_mlp(batch: int = 4) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = _mlp().eval()
    return model, (torch.randn(batch, 16),)


class DecoderLayer(nn.Module):
    """Pre-norm attention over a static KV cache (written in place) and an MLP."""

    def __init__(self, dim: int, heads: int, slots: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)
        shape = (1, heads, slots, dim // heads)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(self, h: torch.Tensor, position: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = h.shape
        q, k, v = self.qkv(self.norm1(h)).split(dim, dim=-1)
        q, k, v = (t.view(batch, tokens, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        self.k_cache.index_copy_(2, position, k)
        self.v_cache.index_copy_(2, position, v)
        attended = nn.functional.scaled_dot_product_attention(
            q, self.k_cache, self.v_cache, attn_mask=mask
        )
        h = h + self.out(attended.transpose(1, 2).reshape(batch, tokens, dim))
        return h + self.down(nn.functional.gelu(self.up(self.norm2(h))))


class Decoder(nn.Module):
    """A decoder LM's decode step: one token in, logits out, every layer's KV cache updated."""

    def __init__(
        self, layers: int = 4, dim: int = 64, heads: int = 4, slots: int = 64, vocab: int = 256
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, slots) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("slots", torch.arange(slots))

    def forward(self, token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        h = self.embed(token)
        # The slots written so far, this one included, for every head and query.
        mask = (self.slots <= position).view(1, 1, 1, -1)
        for layer in self.layers:
            h = layer(h, position, mask)
        return self.head(self.norm(h))


def make_decode() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = Decoder().eval()
    return model, (torch.tensor([[7]]), torch.tensor([5]))


class ThreeBlocks(nn.Module):
    """Three MLP blocks with a graph break between each two: three FX graphs per call."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_mlp() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks[0](x)
        torch._dynamo.graph_break()
        x = self.blocks[1](x)
        torch._dynamo.graph_break()
        out: torch.Tensor = self.blocks[2](x)
        return out


def make_breaks() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = ThreeBlocks().eval()
    return model, (torch.randn(4, 16),)


def _capture_sizes(config: npu_compile.CompilerConfig) -> None:
    config.aclgraph_config.capture_sizes = list(PADDED_SIZES)


#: The capture sizes of the padded workload; its batch of 3 is padded up to 4.
PADDED_SIZES = (4, 8)
PADDED_BATCH = 3


def _workloads() -> dict[str, Workload]:
    listed = [
        Workload("mlp", "MLP 16→32→16, batch 4: one input", make_mlp),
        Workload(
            "decode",
            "decode step: 4 layers, dim 64, KV caches of 64 slots written with index_copy_, "
            "one token",
            make_decode,
        ),
        Workload(
            "padded",
            f"the MLP at batch {PADDED_BATCH}, dynamic, capture sizes {list(PADDED_SIZES)}: "
            f"padded to {PADDED_SIZES[0]}",
            lambda: make_mlp(PADDED_BATCH),
            dynamic=True,
            config=_capture_sizes,
            padded=True,
        ),
        Workload(
            "held",
            "the MLP, each call's output held into the next call (out = f(x))",
            make_mlp,
            held=True,
        ),
        Workload(
            "breaks",
            "three MLP blocks with a graph break between each two: three graphs per call",
            make_breaks,
            graphs=3,
        ),
    ]
    return {workload.name: workload for workload in listed}


WORKLOADS: dict[str, Workload] = _workloads()


def statics_and_caches(model: nn.Module) -> tuple[set[int], set[int]]:
    """The ids of the model's parameters and buffers, and of its KV caches among the buffers.

    What npu_compile makes of them: a parameter or buffer is a PARAMETER input (used in place,
    its address watched), a KV cache (a buffer written in place) a MUTATED one.
    """
    caches = {
        id(buffer)
        for name, buffer in model.named_buffers()
        if name.endswith(("k_cache", "v_cache"))
    }
    statics = {id(p) for p in model.parameters()} | {id(b) for b in model.buffers()}
    return statics - caches, caches
