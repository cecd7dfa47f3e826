"""Hugging Face decoding with the default dynamic KV cache, one step per call.

Each decode step is a call of the compiled model: it may overwrite what the previous step
returned, yet the cache tensors it returned come back as this step's inputs (and each step is a
new shape, a new capture that rewinds the pool over the previous step's memory). They must be
read before anything overwrites them: the tokens equal eager's, and nothing raises.
"""

from __future__ import annotations

import pytest
import torch
from npu_compile import CompilerConfig, get_npu_backend
from npu_compile.backend import NpuBackend

from integration_tests.hf._models import decoder, prompt

TOKENS = 6


def _generate(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Greedy decoding with ``generate``'s default cache (a ``DynamicCache``)."""
    with torch.no_grad():
        out: torch.Tensor = model.generate(  # type: ignore[operator]
            ids, max_new_tokens=TOKENS, do_sample=False, pad_token_id=0
        )
    return out


def _backend(keep_held_outputs: bool = False) -> NpuBackend:
    config = CompilerConfig()
    config.debug.aclgraph.keep_held_outputs = keep_held_outputs
    return get_npu_backend(compiler_config=config)


def _pool_bytes(backend: NpuBackend) -> int:
    return sum(runner.counters.pool_bytes for runner in backend.stats.runners)


def test_generate_with_a_dynamic_cache_matches_eager_and_rewinds_the_pool() -> None:
    model = decoder("llama")
    ids = prompt(1)
    expected = _generate(model, ids)
    eager_forward = model.forward
    pools = {}
    for keep in (False, True):
        torch._dynamo.reset()
        backend = _backend(keep)
        model.forward = torch.compile(eager_forward, backend=backend)  # type: ignore[method-assign]
        assert torch.equal(_generate(model, ids), expected)
        assert backend.stats.fallbacks == []
        assert all(runner.num_paths == 1 for runner in backend.stats.runners)
        pools[keep] = _pool_bytes(backend)
    # One step per call: each new shape's capture rewinds over the previous step's outputs
    # (the cache tensors passed back in are copied out first). Kept, they stack up instead.
    assert pools[False] < pools[True]


def test_a_hand_written_loop_over_the_compiled_module_matches_eager() -> None:
    transformers = pytest.importorskip("transformers")
    model = decoder("llama")
    compiled = torch.compile(model, backend=get_npu_backend())
    tokens = {}
    with torch.no_grad():
        for name, run in (("eager", model), ("compiled", compiled)):
            ids, cache, found = prompt(2), transformers.DynamicCache(), []
            for _ in range(TOKENS):
                out = run(input_ids=ids, past_key_values=cache, use_cache=True)
                ids = out.logits[:, -1:].argmax(-1)  # read within its step
                cache = out.past_key_values  # outputs of this step, inputs of the next
                found.append(int(ids))
            tokens[name] = found
    assert tokens["compiled"] == tokens["eager"]
