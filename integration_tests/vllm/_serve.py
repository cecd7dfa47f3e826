"""Start one vLLM engine on a tiny Llama checkpoint, decode three batches, report one JSON line.

Run as ``python -m integration_tests.vllm._serve CHECKPOINT_DIR OPTIONS_JSON`` with the repository
root on ``PYTHONPATH`` (vLLM's workers import this module by name for the worker extension below).
``OPTIONS_JSON`` holds keyword arguments of ``vllm.LLM`` (``enforce_eager``,
``compilation_config``, ``tensor_parallel_size``, ...) on top of the fixed ones here. The checkpoint
is written first when ``CHECKPOINT_DIR`` has none.

The last line of stdout starts with :data:`RESULT_PREFIX` and holds ``tokens`` (one list of token
ids per prompt, per batch), ``npu_compile`` (``npu_compile_stats`` of every worker) and ``vllm``
(per worker: vLLM's compilation counters, and the counts of the backend object of
``_configured_backend`` when that module was used).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from npu_compile.vllm import NpuCompileWorkerExtension

RESULT_PREFIX = "SERVE_RESULT "

# Three batches of different sizes and prompt lengths, in this order: each step's token count
# either has a graph from an earlier step (replayed) or is new (captured).
BATCHES = (
    [[1, 2, 3, 4], [5, 6, 7], [9, 10, 11, 12, 13]],
    [[20, 21]],
    [[3, 3, 3], [7, 8]],
)
MAX_TOKENS = 8
CONFIGURED_BACKEND_MODULE = "integration_tests.vllm._configured_backend"
WORKER_EXTENSION = "integration_tests.vllm._serve.ReportingWorkerExtension"
# The engine arguments of every run, under the options each run adds (``vllm.LLM`` keywords; a
# headless node gets them as ``vllm serve`` flags).
ENGINE_ARGS: dict[str, Any] = {
    "skip_tokenizer_init": True,
    "dtype": "float32",
    "max_model_len": 128,
    "seed": 0,
    # vLLM's CPU backend checks this share of the machine's memory is free; CI machines share
    # theirs.
    "gpu_memory_utilization": 0.3,
    "worker_extension_cls": WORKER_EXTENSION,
}


def engine_env(cache_root: Path, repo_root: Path) -> dict[str, str]:
    """The environment of one engine process (or one node), with its own ``VLLM_CACHE_ROOT``."""
    return {
        **os.environ,
        # vLLM's workers import the worker extension and the configured backend by name.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root), os.environ.get("PYTHONPATH")])),
        # The compile cache of this run (and of a warm start that reuses it); never ~/.cache.
        "VLLM_CACHE_ROOT": str(cache_root),
        # 1 GiB of KV cache is plenty for 128 tokens; the default takes a share of the machine.
        "VLLM_CPU_KVCACHE_SPACE": "1",
        # Binding OpenMP threads to cores needs a NUMA node per tensor-parallel rank; CI
        # machines have one.
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    }


class ReportingWorkerExtension(NpuCompileWorkerExtension):
    """npu-compile's worker extension, plus what vLLM's compiler did in the worker process."""

    def serve_report(self) -> dict[str, Any]:
        from vllm.compilation.counter import compilation_counter

        configured = sys.modules.get(CONFIGURED_BACKEND_MODULE)
        return {
            "compilation_counter": dataclasses.asdict(compilation_counter),
            "configured_backend": (
                None if configured is None else configured.backend.stats.snapshot()
            ),
        }


def write_checkpoint(directory: Path) -> None:
    """A 2-layer Llama with random weights (seed 0), saved where vLLM can load it."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,  # vLLM's CPU attention needs a head size of 32 to 512
        vocab_size=256,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    partial = directory.with_name(f"{directory.name}.{os.getpid()}.tmp")
    transformers.LlamaForCausalLM(config).save_pretrained(partial)
    partial.rename(directory)


def serve(checkpoint: Path, options: dict[str, Any]) -> dict[str, Any]:
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(checkpoint), **{**ENGINE_ARGS, **options})
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, detokenize=False)
    tokens = []
    for batch in BATCHES:
        outputs = llm.generate([{"prompt_token_ids": ids} for ids in batch], params)
        tokens.append([list(output.outputs[0].token_ids) for output in outputs])
    return {
        "tokens": tokens,
        "npu_compile": llm.collective_rpc("npu_compile_stats"),
        "vllm": llm.collective_rpc("serve_report"),
    }


def main(argv: list[str]) -> None:
    checkpoint, options = Path(argv[0]), json.loads(argv[1])
    if not (checkpoint / "config.json").is_file():
        write_checkpoint(checkpoint)
    result = serve(checkpoint, options)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
