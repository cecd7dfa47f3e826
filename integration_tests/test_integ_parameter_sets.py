"""Two instances of one module class share one FX graph; each keeps its own captured graph."""

from __future__ import annotations

from collections.abc import Callable

import npu_compile
import npu_mempool
import torch


def test_alternating_instances_replay_instead_of_recapturing(
    device: torch.device, warmup_calls: Callable[[torch.device], int]
) -> None:
    torch.manual_seed(0)
    first = torch.nn.Linear(8, 8).to(device)
    second = torch.nn.Linear(8, 8).to(device)
    backend = npu_compile.get_npu_backend()
    step_a = torch.compile(first, backend=backend, fullgraph=True)
    step_b = torch.compile(second, backend=backend, fullgraph=True)
    x = torch.randn(2, 8, device=device)
    with torch.no_grad():
        for _ in range(1 + warmup_calls(device)):  # one capture per parameter set
            step_a(x), step_b(x)
        with npu_mempool.counters.expect(captures=0, replays=6):
            for _ in range(3):
                torch.testing.assert_close(step_a(x), first(x))
                torch.testing.assert_close(step_b(x), second(x))


class _CachedDecoder(torch.nn.Module):
    """A projection plus a KV-cache buffer written in place at a position (a MUTATED input)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("cache", torch.zeros(16, 8))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(0, pos, self.proj(x))
        return self.cache.sum(0)


def test_instances_with_separate_kv_caches_alternate_by_replaying(
    device: torch.device, warmup_calls: Callable[[torch.device], int]
) -> None:
    torch.manual_seed(0)
    models = [_CachedDecoder().to(device) for _ in range(2)]
    references = [_CachedDecoder().to(device) for _ in range(2)]
    for model, reference in zip(models, references, strict=True):
        reference.load_state_dict(model.state_dict())
    backend = npu_compile.get_npu_backend()
    steps = [torch.compile(m, backend=backend, fullgraph=True, dynamic=False) for m in models]
    with torch.no_grad():
        # One capture per instance (its parameters and its cache), after the device's warm-up.
        for _ in range(1 + warmup_calls(device)):
            for index in range(2):
                x, pos = torch.randn(1, 8, device=device), torch.tensor([0], device=device)
                torch.testing.assert_close(steps[index](x, pos), references[index](x, pos))
        with npu_mempool.counters.expect(captures=0, replays=6):
            for position in range(1, 4):
                for index in range(2):
                    x = torch.randn(1, 8, device=device)
                    pos = torch.tensor([position], device=device)
                    torch.testing.assert_close(steps[index](x, pos), references[index](x, pos))
    for model, reference in zip(models, references, strict=True):
        torch.testing.assert_close(model.cache, reference.cache)
