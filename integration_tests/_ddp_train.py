"""Train a model three AdamW steps under DDP on two gloo processes, eagerly and compiled.

    python integration_tests/_ddp_train.py {mlp,llama} BACKEND OUT.pt

Both runs start from the same weights and see the same data; rank 0 saves the parameters of each
(``eager``, ``compiled``) and the backend's statistics (``stats``, for ``npu_compile``).

Run as a script (``test_integ_ddp`` starts it): ``torch.multiprocessing.spawn`` re-imports the
main module in each rank, which a script allows without any path setup.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
STEPS = 3


class _MLP(torch.nn.Module):
    """Four 1 MiB layers: with ``bucket_cap_mb=1``, several buckets."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(512, 512) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def _model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "mlp":
        return _MLP()
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=256,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config)


def _loss(kind: str, model: Any, step: int, rank: int) -> torch.Tensor:
    data = torch.Generator().manual_seed(100 * step + rank)
    if kind == "mlp":
        return model(torch.randn(8, 512, generator=data)).square().mean()  # type: ignore[no-any-return]
    ids = torch.randint(0, 256, (2, 16), generator=data)
    return model(input_ids=ids, labels=ids).loss  # type: ignore[no-any-return]


def _steps(kind: str, backend: str | None, rank: int) -> list[torch.Tensor]:
    from torch.nn.parallel import DistributedDataParallel

    model = _model(kind)
    ddp = DistributedDataParallel(model, bucket_cap_mb=1)
    run = torch.compile(ddp, backend=backend) if backend else ddp
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(STEPS):
        _loss(kind, run, step, rank).backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def _train(rank: int, kind: str, backend: str, port: int, out: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        result: dict[str, Any] = {
            "eager": _steps(kind, None, rank),
            "compiled": _steps(kind, backend, rank),
        }
        if rank == 0:
            if backend == "npu_compile":
                from npu_compile.backend import process_stats

                result["stats"] = process_stats()
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    kind, backend, out = sys.argv[1:4]
    mp.spawn(_train, args=(kind, backend, _free_port(), out), nprocs=WORLD, join=True)
