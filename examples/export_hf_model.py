"""Export a Hugging Face model to a GE graph and run it with the numpy reference runtime.

A tiny Llama built from a config (random weights, nothing downloaded) is exported with
``npu_graph_export.dynamo_export`` to ``export.air`` + ``dynamo.pbtxt``; the numpy runtime then
runs the ``.air`` file without torch, and its logits are compared with eager PyTorch.

    python examples/export_hf_model.py [--out hf_export]

Needs ``transformers``. The causal mask is passed in as a 4-D float tensor: Hugging Face's own
mask builder uses ops (``cumsum``, advanced indexing) that have no GE converter here.
Then try ``npu-graph-export inspect hf_export`` (or ``--dot``), or open ``hf_export/dynamo.pbtxt``
in Netron.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
from npu_graph_export import dynamo_export, runtime
from transformers import LlamaConfig, LlamaForCausalLM


class CausalLogits(torch.nn.Module):
    """``input_ids -> logits`` with an explicit causal mask and no KV cache."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        n = input_ids.shape[1]
        allowed = torch.ones(n, n, dtype=torch.bool).tril()
        mask = torch.zeros(n, n).masked_fill(~allowed, float("-inf"))[None, None]
        logits: torch.Tensor = self.lm(
            input_ids=input_ids, attention_mask=mask, use_cache=False
        ).logits
        return logits


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--out", default="hf_export", help="export directory")
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
    model = CausalLogits(LlamaForCausalLM(config)).eval()
    input_ids = torch.randint(0, config.vocab_size, (1, 8))

    result = dynamo_export(input_ids, model=model, export_path=args.out)
    print(f"wrote {result.air} and {result.pbtxt}: {sum(result.ops.values())} GE ops")

    (logits,) = runtime.load(args.out).run(input_ids.numpy())  # numpy only, no torch
    with torch.no_grad():
        expected = model(input_ids).numpy()
    difference = float(np.abs(logits - expected).max())
    print(f"numpy runtime vs eager PyTorch: max abs difference {difference:.2e}")
    if not difference < 1e-4:
        print("error: the exported graph computes different logits", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
