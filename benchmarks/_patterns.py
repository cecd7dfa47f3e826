"""The patterns of the patterns sweep: how training and serving code calls ``torch.compile``.

The accuracy sweep (``_accuracy``) compiles one model and calls it; users also compile around
the model. Each :class:`Pattern` here builds what such code builds, runs it eagerly and
compiled with one backend, and compares the two with the accuracy sweep's comparison (every
tensor relative to the reference's largest value, dtypes equal):

* ``ddp_*``: ``DistributedDataParallel(bucket_cap_mb=1)``, so that Dynamo's DDPOptimizer
  splits the graph at three or four buckets; ``fsdp2_*``: ``fully_shard`` on every layer and at
  the root, each layer compiled. Each on two gloo processes over loopback, with an HF Llama
  from a small config (``_accuracy_models``' Llama at width 128 and 4 layers) and an MLP of
  four ``Linear(512, 512)``, three AdamW steps (five for FSDP2, whose steady state begins at
  the fourth): the losses and every parameter after each step against the eager run of the
  same seed on the same data, on every rank.
* ``train_step``: forward, backward and ``AdamW.step()`` inside one compiled function, four
  steps; ``compiled_autograd``: the backward called inside the compiled function with
  ``torch._dynamo.config.compiled_autograd`` on.
* ``channels_last_*``: an HF ResNet and its inputs in ``torch.channels_last``, every hidden
  state compared in value and in memory format (inference) or trained two steps (training).
* ``autocast_region``: a float32 region (``autocast(enabled=False)``) inside bfloat16 autocast.
* ``torchao_int8``: the Llama with torchao's int8 weight-only tensor subclass, inference.
* ``lora``: peft LoRA adapters on the Llama: two adapters switched, merged, unmerged and
  disabled, the compiled model called twice in each state.
* ``unet_loop``: diffusers' ``UNet2DConditionModel`` from a small config in a five-step DDIM
  denoising loop, each step's prediction and the final sample compared.

Beside the outcome, :func:`run` records what the backend made of the graphs: for npu_compile
the FX graphs compiled, captured, run eagerly or in pieces (``npu_compile.backend
.process_stats()``) with the reasons it logged, and its graph runners' captures and replays
(``npu_mempool.counters``, process-wide); for both backends the frames Dynamo compiled, its
graph breaks and, for DDP, the buckets DDPOptimizer made. Each pattern marks where its loop is
warm (``_Comparison.steady``): the share of the graph runners' calls after that mark which
replayed is what carries over to a device.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
import importlib.util
import json
import logging
import multiprocessing
import os
import re
import socket
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import npu_compile
import npu_mempool
import torch
from _accuracy import (
    TOLERANCE,
    Outcome,
    _Comparison,
    _inference,
    _leaves,
    _loss,
    _training,
    _Wrong,
    first_line,
    settle,
)
from torch import nn

if TYPE_CHECKING:
    from _accuracy_models import Case

__all__ = ["BACKENDS", "PATTERNS", "Pattern", "PatternOutcome", "run"]

BACKENDS = ("npu_compile", "aot_eager")
#: Steps of the training patterns.
DISTRIBUTED_STEPS = 3
#: Steps before FSDP2's steady state: the first captures each layer, the next two find its
#: parameters at new addresses (FSDP2 gathers them anew every step), after which the runners
#: copy them in like inputs and replay (npu-mempool's MOVED_LIMIT).
FSDP2_WARM = 3
TRAIN_STEPS = 4
DENOISE_STEPS = 5
WORLD = 2
#: The longest a rank may take before the pattern counts as an error (a rank that failed
#: leaves the other waiting in a collective until gloo's own timeout, shorter than this).
RANK_SECONDS = 420
COLLECTIVE_SECONDS = 120

Compile = Callable[[Any], Any]


@dataclasses.dataclass
class PatternOutcome(Outcome):
    """What one pattern did with one backend: an accuracy :class:`Outcome` and the replays.

    Attributes:
        replays: npu_compile only: what its graph runners did, process-wide
            (``npu_mempool.counters``): ``captures``, ``replays``, ``recaptures``,
            ``eager_calls`` and ``runner_fallbacks``.
        recapture_reasons: npu_compile only: the recaptures by reason (``parameter_moved``,
            ``outputs_in_use``, ...).
        dynamo: Both backends: ``frames`` (graphs Dynamo compiled), ``graph_breaks`` and, for
            DDP, ``ddp_buckets`` (the buckets DDPOptimizer split the graph at).
        ranks: Distributed patterns: the ranks that ran to the end.
    """

    replays: dict[str, int] = dataclasses.field(default_factory=dict)
    recapture_reasons: dict[str, int] = dataclasses.field(default_factory=dict)
    dynamo: dict[str, int] = dataclasses.field(default_factory=dict)
    ranks: int | None = None


@dataclasses.dataclass(frozen=True)
class Pattern:
    """One way of calling ``torch.compile``.

    Attributes:
        name: Its name on the command line and in the table.
        title: What it does, for the table.
        mode: ``inference``, ``training`` or ``autocast_bf16``: its tolerance (``_accuracy``).
        body: Runs the pattern eagerly and through ``compile``, comparing with ``check``.
        needs: Modules it imports beyond torch and transformers; absent, it is skipped.
        world: Processes it runs on (gloo over loopback); 1 runs in the calling process.
    """

    name: str
    title: str
    mode: str
    body: Callable[[Compile, _Comparison], None]
    needs: tuple[str, ...] = ()
    world: int = 1


# The models of the accuracy sweep, imported when a pattern builds one: the lists import
# transformers' model modules, seconds of every process (each rank's) that needs none of them.


@functools.cache
def _case(name: str) -> Case:
    from _accuracy_models import HF, VISION

    return next(case for case in HF + VISION if case.name == name)


def _llama() -> Case:
    return _case("meta-llama/Llama-3.2-1B")


@functools.cache
def _wide_llama() -> Case:
    """The accuracy sweep's Llama at width 128 and 4 layers, for the distributed patterns.

    2.6 MB of parameters: DDPOptimizer's buckets are at least 1 MiB (DDP's first bucket), and
    this makes three of them.
    """
    import transformers
    from _accuracy_models import _hf, _lm

    return _hf(
        "meta-llama/Llama-3.2-1B",
        transformers.LlamaForCausalLM,
        transformers.LlamaConfig,
        _lm,
        hidden_size=128,
        intermediate_size=256,
        head_dim=32,
        num_hidden_layers=4,
    )


def _build(case: Case) -> nn.Module:
    from _accuracy_models import build

    return build(case)


class _Mlp(nn.Module):
    """Four ``Linear(512, 512)``, in a module of its own as users write them.

    Not an ``nn.Sequential``: DDP's forward breaks the graph before it calls the module, and
    Dynamo skips a frame of torch's own modules that it does not reach inlined.
    """

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(512, 512) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            x = layer(x)
            if index < len(self.layers) - 1:
                x = torch.relu(x)
        return x


def _mlp() -> nn.Module:
    return _Mlp()


def _mlp_batch(step: int, rank: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 * rank + step)
    return {"x": torch.randn(8, 512, generator=generator)}


def _mlp_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    loss: torch.Tensor = model(batch["x"]).pow(2).mean()
    return loss


def _llama_batch(step: int, rank: int = 0) -> dict[str, torch.Tensor]:
    llama = _wide_llama()
    return llama.inputs(llama.lengths[0], 1000 * rank + step)


def _llama_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return _loss(model(**batch))


@dataclasses.dataclass(frozen=True)
class _Workload:
    make: Callable[[], nn.Module]
    batch: Callable[[int, int], dict[str, torch.Tensor]]
    loss: Callable[[Any, dict[str, torch.Tensor]], torch.Tensor]
    layers: Callable[[nn.Module], list[nn.Module]]


def _layers(model: Any) -> list[nn.Module]:
    """The layers a pattern shards or compiles one by one: the MLP's, the decoder's."""
    inner = getattr(model, "model", model)
    return list(inner.layers)


_MLP = _Workload(_mlp, _mlp_batch, _mlp_loss, _layers)
_LLAMA_WORK = _Workload(lambda: _build(_wide_llama()).train(), _llama_batch, _llama_loss, _layers)


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """A parameter whole: a DTensor (FSDP2's shards) gathered, on every rank alike."""
    full_tensor = getattr(tensor, "full_tensor", None)
    whole = full_tensor() if callable(full_tensor) else tensor
    return whole.detach().clone()


def _ddp(model: nn.Module) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    # 1 MiB, the smallest DDPOptimizer takes (no smaller than DDP's first bucket): the models
    # hold 2.6 and 4 MB, so the graph is split at three or four buckets.
    return DistributedDataParallel(model, bucket_cap_mb=1)


def _distributed(
    wrap: Callable[[nn.Module, _Workload], nn.Module],
    work: _Workload,
    *,
    per_layer: bool = False,
    warm: int = 1,
    steps_run: int | None = None,
) -> Callable[[Compile, _Comparison], None]:
    """Training steps of ``work`` wrapped by ``wrap``, compiled whole or, ``per_layer``, each layer.

    FSDP2 is compiled per layer, as torchtitan does: its hooks run around each sharded layer
    and Dynamo skips them (``skip_fsdp_hooks``), which breaks the graph inside the model's loop
    over its layers, where Dynamo cannot resume, so a whole-model compile would run eagerly.
    """

    def body(compile: Compile, check: _Comparison) -> None:
        rank = torch.distributed.get_rank()

        def steps(compiled: bool) -> Iterator[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
            torch.manual_seed(0)
            model = work.make()
            wrapped = wrap(model, work)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            runner = wrapped
            if compiled and per_layer:
                for layer in work.layers(model):
                    # The bound forward, not the module: the parameters keep their names.
                    layer.forward = compile(layer.forward)
            elif compiled:
                runner = compile(wrapped)
            for step in range(steps_run or DISTRIBUTED_STEPS):
                loss = work.loss(runner, work.batch(step, rank))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                yield loss.detach().clone(), {n: _full(p) for n, p in model.named_parameters()}

        expected = list(steps(compiled=False))
        for step, (loss, parameters) in enumerate(steps(compiled=True)):
            reference_loss, reference_parameters = expected[step]
            check(f"rank {rank} step {step} loss", reference_loss, loss)
            check(f"rank {rank} step {step} parameters", reference_parameters, parameters)
            if step == warm - 1:  # the next step is the steady state's first
                check.steady()

    return body


def _fsdp2(model: nn.Module, work: _Workload) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    for layer in work.layers(model):
        fully_shard(layer)
    fully_shard(model)
    return model


def _train_step(compile: Compile, check: _Comparison) -> None:
    def make() -> tuple[nn.Module, Callable[[torch.Tensor], torch.Tensor]]:
        torch.manual_seed(0)
        model = _mlp()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(x: torch.Tensor) -> torch.Tensor:
            loss: torch.Tensor = model(x).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            return loss

        return model, step

    reference, reference_step = make()
    model, step = make()
    compiled = compile(step)
    for index in range(TRAIN_STEPS):
        if index == 1:
            check.steady()
        x = _mlp_batch(index)["x"]
        check(f"step {index} loss", reference_step(x), compiled(x))
        check(
            f"step {index} parameters",
            dict(reference.named_parameters()),
            dict(model.named_parameters()),
        )


def _compiled_autograd(compile: Compile, check: _Comparison) -> None:
    torch.manual_seed(0)
    reference = _mlp()
    model = copy.deepcopy(reference)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (reference, model)]

    def step(x: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = model(x).pow(2).mean()
        loss.backward()
        return loss

    with torch._dynamo.config.patch(compiled_autograd=True):
        compiled = compile(step)
        for index in range(TRAIN_STEPS):
            if index == 1:
                check.steady()
            x = _mlp_batch(index)["x"]
            expected = reference(x).pow(2).mean()
            expected.backward()
            check(f"step {index} loss", expected, compiled(x))
            grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
            check(
                f"step {index} grads",
                {n: p.grad for n, p in reference.named_parameters() if p.grad is not None},
                grads,
            )
            for optimizer in optimizers:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            # A training loop holds no gradient into the next step; one still held is an output
            # of the backward's graph in use, which the next backward may not overwrite.
            del grads, expected


class _LayoutComparison(_Comparison):
    """Values as ``_Comparison`` does, and every 4-d tensor's memory format as well."""

    def __call__(self, name: str, reference: Any, got: Any) -> None:
        super().__call__(name, reference, got)
        actual = dict(_leaves(got, name))
        for key, ref in _leaves(reference, name):
            if ref.dim() != 4:
                continue
            wanted = ref.is_contiguous(memory_format=torch.channels_last)
            if actual[key].is_contiguous(memory_format=torch.channels_last) != wanted:
                layout = "channels_last" if wanted else "contiguous"
                raise _Wrong(f"{key}: not {layout} as eager's (strides {actual[key].stride()})")


def _channels_last_case() -> Case:
    resnet = _case("ResNet")

    def inputs(size: int, seed: int) -> dict[str, Any]:
        given = resnet.inputs(size, seed)
        pixels = given["pixel_values"].to(memory_format=torch.channels_last)
        return {**given, "pixel_values": pixels, "output_hidden_states": True}

    return dataclasses.replace(resnet, inputs=inputs)


def _channels_last(mode: str) -> Callable[[Compile, _Comparison], None]:
    def body(compile: Compile, check: _Comparison) -> None:
        case = _channels_last_case()
        model = _build(case).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        model = model.train() if mode == "training" else model.eval()
        layout = _LayoutComparison(check.tolerance, check.mode)
        try:
            if mode == "training":
                # Three steps: the first captures, the later ones should replay.
                _training(case, compile(model), model, layout, steps=3)
            else:
                _inference(case, compile(model), model, layout)
        finally:
            check.worst, check.where, check.compared = layout.worst, layout.where, layout.compared
            check.adopt_steady(layout)

    return body


class _Float32Head(nn.Module):
    """A projection under autocast, then a float32 region, as models keep norms and rotary
    tables in float32 under bfloat16 autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.head = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        low = self.proj(x)
        with torch.autocast(x.device.type, enabled=False):
            high = self.head(torch.layer_norm(low.float(), (64,)))
        return low, high


def _autocast_region(compile: Compile, check: _Comparison) -> None:
    torch.manual_seed(0)
    model = _Float32Head().eval()
    compiled = compile(model)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for seed in range(3):
            if seed == 1:
                check.steady()
            x = torch.randn(4, 64, generator=torch.Generator().manual_seed(seed))
            check(f"call {seed}", model(x), compiled(x))


def _torchao_int8(compile: Compile, check: _Comparison) -> None:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    llama = _llama()
    model = _build(llama).eval()
    quantize_(model, Int8WeightOnlyConfig())
    weights = {type(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    if weights <= {nn.Parameter, torch.Tensor}:
        # Nothing to compare through a subclass then: say so rather than pass.
        raise RuntimeError("quantize_ left every Linear weight a plain tensor")
    _inference(llama, compile(model), model, check)


def _lora(compile: Compile, check: _Comparison) -> None:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    # init_lora_weights=False: random B as well as A, so that each adapter changes the output.
    first = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    second = LoraConfig(
        r=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], init_lora_weights=False
    )
    llama = _llama()
    model = get_peft_model(_build(llama), first, adapter_name="first")
    model.add_adapter("second", second)
    model.eval()
    compiled = compile(model)
    calls = iter(range(1000))

    def both(state: str) -> None:
        for _ in range(2):  # the second call of a state replays what the first captured
            seed = next(calls)
            inputs = llama.inputs(llama.lengths[0], seed)
            with torch.no_grad():
                check(f"{state} call {seed}", model(**inputs), compiled(**inputs))

    model.set_adapter("first")
    both("adapter first")
    model.set_adapter("second")
    both("adapter second")
    model.merge_adapter()
    both("second merged")
    model.unmerge_adapter()
    both("second unmerged")
    with model.disable_adapter():
        both("adapters disabled")
    model.set_adapter("first")
    check.steady()  # every state was seen: from here on, calls replay
    both("adapter first again")


def _unet_loop(compile: Compile, check: _Comparison) -> None:
    from diffusers import DDIMScheduler, UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=16,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=16,
    ).eval()
    generator = torch.Generator().manual_seed(1)
    noise = torch.randn(2, 4, 16, 16, generator=generator)
    text = torch.randn(2, 8, 32, generator=generator)

    def denoise(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
        scheduler = DDIMScheduler(num_train_timesteps=1000)
        scheduler.set_timesteps(DENOISE_STEPS)
        sample = noise.clone()
        with torch.no_grad():
            for index, timestep in enumerate(scheduler.timesteps):
                predicted = model(sample, timestep, encoder_hidden_states=text).sample
                yield f"step {index} prediction", predicted
                sample = scheduler.step(predicted, timestep, sample).prev_sample
        yield "final sample", sample

    expected = [(name, tensor.clone()) for name, tensor in denoise(unet)]
    for index, ((name, reference), (_, got)) in enumerate(
        zip(expected, denoise(compile(unet)), strict=True)
    ):
        check(name, reference, got)
        if index == 0:  # the first step captured the UNet's graphs; the next ones replay
            check.steady()


PATTERNS: dict[str, Pattern] = {
    p.name: p
    for p in (
        Pattern(
            "ddp_llama",
            "DDP, bucket_cap_mb=1 (DDPOptimizer), HF Llama, 2 gloo ranks, 3 AdamW steps",
            "training",
            _distributed(lambda m, _: _ddp(m), _LLAMA_WORK),
            world=WORLD,
        ),
        Pattern(
            "ddp_mlp",
            "DDP, bucket_cap_mb=1 (DDPOptimizer), MLP 4x Linear(512, 512), 2 gloo ranks, 3 AdamW "
            "steps",
            "training",
            _distributed(lambda m, _: _ddp(m), _MLP),
            world=WORLD,
        ),
        Pattern(
            "fsdp2_llama",
            "FSDP2 fully_shard per decoder layer and root, each layer compiled, HF Llama, 2 gloo "
            "ranks, 5 AdamW steps",
            "training",
            _distributed(_fsdp2, _LLAMA_WORK, per_layer=True, warm=FSDP2_WARM, steps_run=5),
            world=WORLD,
        ),
        Pattern(
            "fsdp2_mlp",
            "FSDP2 fully_shard per Linear and root, each Linear compiled, MLP, 2 gloo ranks, "
            "5 AdamW steps",
            "training",
            _distributed(_fsdp2, _MLP, per_layer=True, warm=FSDP2_WARM, steps_run=5),
            world=WORLD,
        ),
        Pattern(
            "train_step",
            "forward, backward, AdamW step and zero_grad in one compiled function, 4 steps",
            "training",
            _train_step,
        ),
        Pattern(
            "compiled_autograd",
            "compiled_autograd on, backward inside the compiled function, 4 steps",
            "training",
            _compiled_autograd,
        ),
        Pattern(
            "channels_last_inference",
            "HF ResNet and inputs channels_last, inference, hidden states' layout compared",
            "inference",
            _channels_last("inference"),
        ),
        Pattern(
            "channels_last_training",
            "HF ResNet and inputs channels_last, 3 training steps",
            "training",
            _channels_last("training"),
        ),
        Pattern(
            "autocast_region",
            "a float32 region (autocast(enabled=False)) inside bfloat16 autocast",
            "autocast_bf16",
            _autocast_region,
        ),
        Pattern(
            "torchao_int8",
            "torchao int8 weight-only (Int8WeightOnlyConfig, a tensor subclass), HF Llama",
            "inference",
            _torchao_int8,
            needs=("torchao",),
        ),
        Pattern(
            "lora",
            "peft LoRA on HF Llama: two adapters switched, merged, unmerged, disabled",
            "inference",
            _lora,
            needs=("peft",),
        ),
        Pattern(
            "unet_loop",
            "diffusers UNet2DConditionModel in a 5-step DDIM loop",
            "inference",
            _unet_loop,
            needs=("diffusers",),
        ),
    )
}


class _Logged(logging.Handler):
    """What npu_compile warned about and how many buckets DDPOptimizer made, while attached."""

    _EAGER = re.compile(r"runs (?:eagerly|without static kernels) \((\w+)\): (.*)", re.DOTALL)
    _BUCKETS = re.compile(r"DDPOptimizer used bucket cap \S+ and created (\d+) buckets")
    _SOURCES = ("npu_compile", "torch._dynamo.backends.distributed")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.fallbacks: list[str] = []
        self.buckets: list[int] = []
        self._levels: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        buckets = self._BUCKETS.search(message)
        if buckets:
            self.buckets.append(int(buckets.group(1)))
        elif record.name == "npu_compile" and record.levelno >= logging.WARNING:
            eager = self._EAGER.search(message)
            # The graph's name left out: the same reason for many graphs is one reason.
            self.fallbacks.append(f"{eager.group(1)}: {eager.group(2)}" if eager else message)

    def __enter__(self) -> _Logged:
        for name in self._SOURCES:
            source = logging.getLogger(name)
            self._levels.append(source.level)
            source.addHandler(self)
            if not source.isEnabledFor(logging.INFO):
                source.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, level in zip(self._SOURCES, self._levels, strict=True):
            source = logging.getLogger(name)
            source.removeHandler(self)
            source.setLevel(level)


def _counts() -> dict[str, int]:
    stats = npu_compile.backend.process_stats()
    runners = npu_mempool.counters
    return {
        "fx_graphs": stats["fx_graphs"],
        "captured": stats["captured"],
        "eager": stats["eager"],
        "fallbacks": stats["fallbacks"],
        "pieces": stats["piecewise"],
        "captures": runners.captures,
        "replays": runners.replays,
        "recaptures": runners.recaptures,
        "eager_calls": runners.eager_calls,
        "runner_fallbacks": runners.fallbacks,
    }


_GRAPH_KEYS = ("fx_graphs", "captured", "eager", "fallbacks", "pieces")


def _measure(pattern: Pattern, backend: str) -> PatternOutcome:
    """``pattern`` with ``backend`` in this process (a rank of it, for a distributed one)."""
    torch._dynamo.reset()
    from torch._dynamo.utils import counters as dynamo_counters

    dynamo_counters.clear()
    outcome = PatternOutcome()
    check = _Comparison(TOLERANCE[pattern.mode], pattern.mode)
    before = _counts()
    reasons_before = dict(npu_mempool.counters.recapture_reasons)
    with _Logged() as logged, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            pattern.body(lambda fn: torch.compile(fn, backend=backend), check)
        except _Wrong as wrong:
            outcome.result, outcome.detail = "wrong", str(wrong)
        except Exception as error:
            outcome.result, outcome.detail = "error", first_line(error)
    outcome.worst = check.worst if check.compared else None
    outcome.where = check.where
    moved = {key: value - before[key] for key, value in _counts().items()}
    outcome.dynamo = {
        "frames": int(dynamo_counters["stats"]["unique_graphs"]),
        "graph_breaks": sum(dynamo_counters["graph_break"].values()),
    }
    if logged.buckets:
        outcome.dynamo["ddp_buckets"] = max(logged.buckets)
    if backend == "npu_compile":
        outcome.graphs = {key: moved[key] for key in _GRAPH_KEYS}
        outcome.replays = {key: moved[key] for key in moved if key not in _GRAPH_KEYS}
        reasons = npu_mempool.counters.recapture_reasons
        outcome.recapture_reasons = {
            str(reason): count - reasons_before.get(reason, 0)
            for reason, count in reasons.items()
            if count > reasons_before.get(reason, 0)
        }
        outcome.whole = bool(moved["captured"]) and not moved["fallbacks"] and not moved["pieces"]
        outcome.steady = check.steady_calls()
        pieces = [f"{moved['pieces']} graphs captured in pieces"] if moved["pieces"] else []
        settle(outcome, logged.fallbacks, pieces)
    torch._dynamo.reset()
    return outcome


def missing(pattern: Pattern) -> list[str]:
    """The modules ``pattern`` needs that are not installed."""
    return [name for name in pattern.needs if importlib.util.find_spec(name) is None]


def run(pattern: Pattern, backend: str) -> PatternOutcome:
    """Run ``pattern`` with ``backend`` against eager: in this process, or on its ranks.

    A pattern whose modules are not installed is ``skipped``, naming them.
    """
    absent = missing(pattern)
    if absent:
        return PatternOutcome(result="skipped", detail=f"needs {', '.join(absent)}")
    if pattern.world == 1:
        return _measure(pattern, backend)
    return _on_ranks(pattern, backend)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _rank(rank: int, world: int, port: int, name: str, backend: str, out: str) -> None:
    """One rank of a distributed pattern (the spawned process's entry point)."""
    # Loopback only, and one thread per rank: the ranks share the machine's cores.
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=COLLECTIVE_SECONDS),
    )
    try:
        outcome = _measure(PATTERNS[name], backend)
    finally:
        torch.distributed.destroy_process_group()
    Path(out).write_text(json.dumps(dataclasses.asdict(outcome)))


_SEVERITY = ("pass", "pieces", "fallback", "wrong", "error")


def _on_ranks(pattern: Pattern, backend: str) -> PatternOutcome:
    """``pattern`` on ``pattern.world`` processes; the outcome of the rank that fared worst."""
    context = multiprocessing.get_context("spawn")
    port = _free_port()
    with tempfile.TemporaryDirectory() as scratch:
        paths = [Path(scratch) / f"rank{rank}.json" for rank in range(pattern.world)]
        processes = [
            context.Process(
                target=_rank,
                args=(rank, pattern.world, port, pattern.name, backend, str(path)),
            )
            for rank, path in enumerate(paths)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(RANK_SECONDS)
        outcomes: list[PatternOutcome] = []
        finished = 0
        for rank, (process, path) in enumerate(zip(processes, paths, strict=True)):
            if process.is_alive():
                process.kill()
                process.join()
                outcomes.append(
                    PatternOutcome(result="error", detail=f"rank {rank}: ran over {RANK_SECONDS} s")
                )
            elif not path.exists():
                outcomes.append(
                    PatternOutcome(
                        result="error", detail=f"rank {rank}: died (exit code {process.exitcode})"
                    )
                )
            else:
                finished += 1
                outcome = PatternOutcome(**json.loads(path.read_text()))
                if outcome.result == "error":
                    outcome.detail = f"rank {rank}: {outcome.detail}"
                outcomes.append(outcome)
    # Rank 0's graphs and replays stand for all (every rank compiles the same graphs); the
    # result is the worst rank's, the first of them where several fared alike.
    worst = max(outcomes, key=lambda o: _SEVERITY.index(o.result))
    merged = dataclasses.replace(
        outcomes[0],
        result=worst.result,
        detail=worst.detail,
        worst=max((o.worst for o in outcomes if o.worst is not None), default=None),
        where=worst.where or outcomes[0].where,
        ranks=finished,
    )
    return merged
