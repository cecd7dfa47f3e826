"""Export time and file sizes of npu-graph-export for Llama-style decoders of growing size.

For each size the decoder (RMSNorm, rotary embeddings, causal mask, SwiGLU MLP, written in plain
PyTorch) is exported with ``dynamo_export`` twice, static and dynamic batch/sequence, and the
``.air`` is run once with the numpy reference runtime. Reported per row: parameters, trace +
convert + write time, ``.air`` / ``dynamo.pbtxt`` / weight-file bytes, GE op count, runtime load
and run time, and the largest difference from eager (a faithfulness check, not a speed claim).
The biggest size uses ``embed_limit_bytes=0`` too, to show the FileConstant layout.
Then stock ``transformers`` models (tiny random configs, 64 hidden, 2 layers) are exported as
users call them (``input_ids``, ``attention_mask``, ``use_cache=False``), static and dynamic,
with export seconds, GE ops and the runtime's largest difference from eager (skipped when
transformers is missing, or with ``--no-hf``).

    python benchmarks/export_scale.py [--sizes 64x2,128x4,256x4,512x8] [--out benchmarks/results]

Prints tables and writes ``benchmarks/results/export_scale.json``. Needs torch and
npu-graph-export (and transformers for the second table).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from npu_graph_export import ExportConfig, dynamo_export, runtime
from torch import nn

VOCAB = 1024


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.norm2 = RMSNorm(dim)
        self.gate = nn.Linear(dim, 3 * dim, bias=False)
        self.up = nn.Linear(dim, 3 * dim, bias=False)
        self.down = nn.Linear(3 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        shape = (batch, seq, self.heads, dim // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in self.qkv(self.norm1(x)).split(dim, -1))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(batch, seq, dim))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    def __init__(self, dim: int, layers: int, max_len: int = 64) -> None:
        super().__init__()
        heads = max(dim // 32, 1)
        self.embed = nn.Embedding(VOCAB, dim)
        self.layers = nn.ModuleList(Layer(dim, heads) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)
        head_dim = dim // heads
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_len).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        seq = idx.shape[1]
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x, self.cos[:seq], self.sin[:seq])
        return self.head(self.norm(x))


def _sizes(path: Path) -> dict[str, int]:
    air = sum(p.stat().st_size for p in path.glob("*.air"))
    pbtxt = (path / "dynamo.pbtxt").stat().st_size
    weights = sum(p.stat().st_size for p in path.iterdir() if p.suffix not in {".air", ".pbtxt"})
    return {"air_bytes": air, "pbtxt_bytes": pbtxt, "weight_file_bytes": weights}


def measure(dim: int, layers: int, *, dynamic: bool, embed_limit: int | None) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Decoder(dim, layers).eval()
    ids = torch.randint(0, VOCAB, (2, 16))
    config = ExportConfig() if embed_limit is None else ExportConfig(embed_limit_bytes=embed_limit)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "export"
        start = time.perf_counter()
        result = dynamo_export(ids, model=model, export_path=out, dynamic=dynamic, config=config)
        export_s = time.perf_counter() - start
        start = time.perf_counter()
        loaded = runtime.load(out)
        load_s = time.perf_counter() - start
        run_ids = torch.randint(0, VOCAB, (3, 11) if dynamic else (2, 16))
        start = time.perf_counter()
        (got,) = loaded.run(run_ids.numpy())
        run_s = time.perf_counter() - start
        with torch.no_grad():
            expected = model(run_ids).numpy()
        row = {
            "dim": dim,
            "layers": layers,
            "dynamic": dynamic,
            "params": sum(p.numel() for p in model.parameters()),
            "externalized": result.externalized,
            "ge_ops": sum(result.ops.values()),
            "export_s": round(export_s, 3),
            "runtime_load_s": round(load_s, 3),
            "runtime_run_s": round(run_s, 3),
            "max_abs_diff": float(np.abs(got - expected).max()),
            **_sizes(out),
        }
    return row


def _hf_models() -> dict[str, Any]:
    """Tiny random configs of stock transformers models (never downloaded)."""
    import transformers as t

    common: dict[str, Any] = {
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "max_position_embeddings": 64,
    }
    kv = {**common, "num_key_value_heads": 2}
    return {
        "gpt2": lambda: t.GPT2LMHeadModel(
            t.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64)
        ),
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**kv)),
        "qwen2": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**kv)),
        "mistral": lambda: t.MistralForCausalLM(t.MistralConfig(**kv)),
        "phi3": lambda: t.Phi3ForCausalLM(t.Phi3Config(**kv, pad_token_id=0)),
        "gemma2": lambda: t.Gemma2ForCausalLM(t.Gemma2Config(**kv, head_dim=16)),
        "opt": lambda: t.OPTForCausalLM(
            t.OPTConfig(
                vocab_size=VOCAB,
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                ffn_dim=128,
                word_embed_proj_dim=64,
            )
        ),
        "bert": lambda: t.BertModel(
            t.BertConfig(
                vocab_size=VOCAB,
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=128,
            )
        ),
    }


def measure_hf(name: str, build: Any, *, dynamic: bool) -> dict[str, Any]:
    """Export a stock transformers model as users call it; run it with a padded mask."""
    torch.manual_seed(0)
    model = build().eval()
    extra = {} if name == "bert" else {"use_cache": False}
    ids = torch.randint(0, VOCAB, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, :5] = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "export"
        start = time.perf_counter()
        result = dynamo_export(
            model=model,
            export_path=out,
            dynamic=dynamic,
            input_ids=ids,
            attention_mask=mask,
            **extra,
        )
        export_s = time.perf_counter() - start
        run_ids, run_mask = (ids[:, :11], mask[:, :11]) if dynamic else (ids, mask)
        start = time.perf_counter()
        got = runtime.load(out).run(run_ids.numpy(), run_mask.numpy())[0]
        run_s = time.perf_counter() - start
        with torch.no_grad():
            expected = model(input_ids=run_ids, attention_mask=run_mask, **extra)[0].numpy()
    return {
        "model": name,
        "dynamic": dynamic,
        "params": sum(p.numel() for p in model.parameters()),
        "ge_ops": sum(result.ops.values()),
        "export_s": round(export_s, 3),
        "runtime_run_s": round(run_s, 3),
        "max_abs_diff": float(np.abs(got - expected).max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64x2,128x4,256x4,512x8", help="DIMxLAYERS,...")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--no-hf", action="store_true", help="skip the stock transformers models")
    args = parser.parse_args()
    try:
        sizes = [(int(d), int(n)) for d, n in (item.split("x") for item in args.sizes.split(","))]
    except ValueError:
        parser.error(f"--sizes wants DIMxLAYERS,... (such as 64x2,128x4), got {args.sizes!r}")
    for dim, layers in sizes:
        heads = max(dim // 32, 1)  # as Decoder chooses
        if dim < 2 or dim % heads or (dim // heads) % 2 or layers < 1:
            parser.error(f"--sizes: {dim}x{layers} cannot be split into even-sized heads")
    rows = []
    for dim, layers in sizes:
        for dynamic in (False, True):
            rows.append(measure(dim, layers, dynamic=dynamic, embed_limit=None))
    rows.append(measure(*sizes[-1], dynamic=True, embed_limit=0))

    header = (
        f"{'dim':>5} {'layers':>6} {'dyn':>4} {'params':>10} {'files':>5} {'ops':>5} "
        f"{'export s':>8} {'air MiB':>8} {'pbtxt KiB':>9} {'weights MiB':>11} {'run s':>6} "
        f"{'max diff':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['dim']:>5} {r['layers']:>6} {'yes' if r['dynamic'] else 'no':>4} "
            f"{r['params']:>10} {'yes' if r['externalized'] else 'no':>5} {r['ge_ops']:>5} "
            f"{r['export_s']:>8.2f} {r['air_bytes'] / 2**20:>8.2f} "
            f"{r['pbtxt_bytes'] / 2**10:>9.1f} {r['weight_file_bytes'] / 2**20:>11.2f} "
            f"{r['runtime_run_s']:>6.3f} {r['max_abs_diff']:>9.2e}"
        )
    hf_rows: list[dict[str, Any]] = []
    if not args.no_hf:
        try:
            models = _hf_models()
        except ImportError:
            print("transformers is not installed: skipping the Hugging Face rows")
            models = {}
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tiny-config notes from transformers
            for name, build in models.items():
                for dynamic in (False, True):
                    hf_rows.append(measure_hf(name, build, dynamic=dynamic))
        if hf_rows:
            print()
            print(
                f"{'model':>8} {'dyn':>4} {'params':>8} {'ops':>5} {'export s':>8} "
                f"{'run s':>6} {'max diff':>9}"
            )
            for r in hf_rows:
                print(
                    f"{r['model']:>8} {'yes' if r['dynamic'] else 'no':>4} {r['params']:>8} "
                    f"{r['ge_ops']:>5} {r['export_s']:>8.2f} {r['runtime_run_s']:>6.3f} "
                    f"{r['max_abs_diff']:>9.2e}"
                )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": "export_scale",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "note": "CPU timings on a shared machine; compare rows, not machines",
        "rows": rows,
        "transformers_rows": hf_rows,
    }
    target = out / "export_scale.json"
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n")
    tmp.replace(target)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
