"""Hugging Face ``generate`` under npu-compile's reduce-overhead mode.

A tiny Llama built from a config (random weights, nothing downloaded) generates greedily twice:
eagerly, then with ``model.forward`` compiled by npu-compile and a static KV cache, so every decode
step has the same shapes and replays one captured graph. The tokens must be identical.

    python examples/hf_generate.py [--device cpu|cuda|npu] [--tokens 8]

Needs ``transformers`` (``pip install "transformers>=5,<6"``). On CPU the graph is emulated: the
numbers are checked, the speed is not the point.
"""

from __future__ import annotations

import argparse
import sys

import npu_compile
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--device", default="cpu", help="where to run: cpu, cuda or npu")
    parser.add_argument("--tokens", type=int, default=8, help="new tokens to generate")
    args = parser.parse_args()

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(config).to(args.device).eval()
    prompt = torch.randint(0, config.vocab_size, (1, 6), device=args.device)

    with torch.no_grad():
        eager = model.generate(prompt, max_new_tokens=args.tokens, do_sample=False)

    compiler_config = npu_compile.CompilerConfig()
    compiler_config.mode = "reduce-overhead"
    backend = npu_compile.get_npu_backend(compiler_config=compiler_config)
    # Compile forward only: generate() stays Python, each forward call replays a captured graph.
    model.forward = torch.compile(model.forward, backend=backend, dynamic=False)
    with torch.no_grad():
        compiled = model.generate(
            prompt, max_new_tokens=args.tokens, do_sample=False, cache_implementation="static"
        )

    print("eager:          ", eager[0].tolist())
    print("reduce-overhead:", compiled[0].tolist())
    captures = sum(runner.counters.captures for runner in backend.stats.runners)
    replays = sum(runner.counters.replays for runner in backend.stats.runners)
    print(f"device graphs captured: {captures}, replays: {replays}")
    for name, message in backend.stats.fallbacks:
        reason = backend.stats.fallback_reasons[name]  # a FallbackReason code
        print(f"fell back to eager: {name} ({reason}): {message}")
    if not torch.equal(eager, compiled):
        print("error: the compiled model generated different tokens", file=sys.stderr)
        return 1
    if captures == 0:
        print("error: nothing was captured", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
