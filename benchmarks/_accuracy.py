"""One model of the accuracy sweeps, run one way against eager: its outcome.

:func:`run` compiles a model of ``_accuracy_models`` with one backend and compares it with eager:

* inference: ``eval()``, ``torch.no_grad()``, three calls at one length and one at another,
  every output tensor compared;
* training: ``train()``, two steps of forward and backward, the loss, every parameter's
  gradient and every buffer (batch norm's running statistics) compared after each step;
* autocast (``autocast_bf16``, ``autocast_fp16``): inference as above under
  ``torch.autocast(device_type, dtype)``, compared with eager under the same autocast.

The backends: ``npu_compile`` (default options, with ``debug.aclgraph.check_passes`` on, so a pass
that changes a value raises naming itself) and torch's ``aot_eager``, which tells torch's own
limits from ours. The outcome is one of ``pass``, ``wrong`` (with how far off and where),
``fallback`` or ``pieces`` (with the reasons the backend recorded) and ``error`` (its first
line); for npu_compile it also says whether every graph was captured whole. Every output must
have eager's dtype as well as its values.
"""

from __future__ import annotations

import copy
import dataclasses
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import npu_compile
import npu_mempool
import torch

if TYPE_CHECKING:
    # Imported where a model is built (run): the lists import transformers' model modules,
    # seconds that a process comparing other code (the patterns sweep's ranks) does not need.
    from _accuracy_models import Case

__all__ = [
    "ALL_MODES",
    "AUTOCAST",
    "BACKENDS",
    "MODES",
    "TOLERANCE",
    "Outcome",
    "first_line",
    "run",
    "settle",
]

#: The autocast modes and the dtype each runs in.
AUTOCAST = {"autocast_bf16": torch.bfloat16, "autocast_fp16": torch.float16}
#: The largest difference allowed, relative to the largest value of the reference tensor. Under
#: autocast, eager and a compiled graph run the same ops in the same low-precision dtype; they may
#: still round apart where the graph's ops are decomposed or grouped otherwise (torch's aot_eager
#: does). A bfloat16 value holds 8 significant bits (a step of 2**-8 = 3.9e-3 near 1), a float16
#: value 11 (4.9e-4): the tolerances allow a few such steps, relative to the tensor's largest
#: value, and no more, since a region autocast leaves in float32 must stay float32.
TOLERANCE = {
    "inference": 1e-4,
    "training": 1e-3,
    "autocast_bf16": 1.6e-2,
    "autocast_fp16": 2e-3,
}
MODES = ("inference", "training")
#: Every mode the sweep knows: ``MODES`` and the autocast modes, run on request.
ALL_MODES = (*MODES, *AUTOCAST)
BACKENDS = ("npu_compile", "aot_eager")


@dataclasses.dataclass
class Outcome:
    """What one model did one way.

    Attributes:
        result: ``pass``, ``wrong``, ``fallback``, ``pieces`` or ``error``.
        detail: How far off and where (``wrong``), the reasons (``fallback``, ``pieces``), the
            first line (``error``).
        worst: The largest relative difference seen (``None`` before any comparison).
        where: The tensor it was seen in.
        graphs: FX graphs compiled (npu_compile: captured, eager, fallen back, in pieces).
        whole: npu_compile only: every graph captured whole, none eager or in pieces.
        steady: npu_compile only: the calls its graph runners answered once the loop was
            warm (after the first call or step, before a new length), and how many of them
            replayed, and how many were the first call of a graph Dynamo compiled during it
            (a model that changes its own state on its first call, as Hugging Face's
            classification losses set ``config.problem_type``, is compiled again on the second):
            ``{"calls": n, "replays": r, "new_graphs": g}``. A graph captured and never replayed
            saves nothing, so this is what carries over to a device.
    """

    result: str = "pass"
    detail: str = ""
    worst: float | None = None
    where: str = ""
    graphs: dict[str, int] = dataclasses.field(default_factory=dict)
    whole: bool | None = None
    steady: dict[str, int] | None = None


class _Wrong(Exception):
    pass


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{prefix}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{prefix}[{index}]")
    elif hasattr(value, "to_tuple"):
        yield from _leaves(dict(value.items()), prefix)


def _runner_calls() -> tuple[int, int, int]:
    """Every graph runner's calls, replays and first captures so far (npu-mempool's counters).

    A runner's first capture has no reason (``capture_reasons`` counts the later ones): the
    first captures are the graphs that were new.
    """
    counters = npu_mempool.counters
    captures = counters.captures
    return counters.calls, counters.replays, captures - sum(counters.capture_reasons.values())


class _Comparison:
    def __init__(self, tolerance: float, mode: str = "") -> None:
        self.tolerance = tolerance
        self.mode = mode
        self.worst = 0.0
        self.where = ""
        self.compared = 0
        # The graph runners' calls, replays and first captures when the steady state began and
        # ended.
        self._steady: list[tuple[int, int, int]] = []

    def steady(self) -> None:
        """Mark where the steady state begins (first call), then where it ends (second call).

        A body calls it once the loop is warm (after the first call or step) and again before
        it changes the shapes (a new length); the runners' counters in between say how many
        calls replayed. Without the second mark it runs to the body's end.
        """
        if len(self._steady) < 2:
            self._steady.append(_runner_calls())

    def adopt_steady(self, other: _Comparison) -> None:
        """Take the steady state ``other`` marked (a comparison that checked for this one)."""
        self._steady = list(other._steady)

    def steady_calls(self) -> dict[str, int] | None:
        """``{"calls", "replays"}`` of the steady state, or ``None`` if it was never begun."""
        if not self._steady:
            return None
        begin = self._steady[0]
        end = self._steady[1] if len(self._steady) > 1 else _runner_calls()
        return {
            "calls": end[0] - begin[0],
            "replays": end[1] - begin[1],
            "new_graphs": end[2] - begin[2],
        }

    def __call__(self, name: str, reference: Any, got: Any) -> None:
        expected = dict(_leaves(reference, name))
        actual = dict(_leaves(got, name))
        if expected.keys() != actual.keys():
            raise _Wrong(f"{name}: outputs {sorted(actual)} instead of {sorted(expected)}")
        for key, ref in expected.items():
            value = actual[key]
            if ref.shape != value.shape:
                raise _Wrong(f"{key}: shape {tuple(value.shape)} instead of {tuple(ref.shape)}")
            # A region autocast must leave in float32 (rotary tables, norms) that comes back in
            # bfloat16 is wrong even where the values happen to round alike.
            dtype = f"{key}: dtype {value.dtype} instead of {ref.dtype}"
            if not ref.is_floating_point():
                if ref.dtype != value.dtype:
                    self.worst, self.where = float("inf"), key
                    raise _Wrong(dtype)
                if not torch.equal(ref, value):
                    self.worst, self.where = float("inf"), key
                    raise _Wrong(f"{key}: integer values differ")
                continue
            self.compared += 1
            ref32, value32 = ref.detach().float(), value.detach().float()
            scale = ref32.abs().max().item() or 1.0
            off = (ref32 - value32).abs().max().item() / scale
            if off != off:  # NaN where eager has a number
                off = float("inf")
            if off > self.worst:
                self.worst, self.where = off, key
            if ref.dtype != value.dtype:
                self.where = key
                raise _Wrong(f"{dtype} (values off by {off:.2e} of its scale)")
            if off > self.tolerance:
                raise _Wrong(f"{key}: off by {off:.2e} of its scale")


def _loss(output: Any) -> torch.Tensor:
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    # A model without a head of its own: the mean of its first output.
    return next(tensor for _, tensor in _leaves(output, "out") if tensor.is_floating_point()).mean()


def _backend(name: str) -> tuple[Any, npu_compile.NpuBackend | None]:
    if name == "aot_eager":
        return "aot_eager", None
    config = npu_compile.CompilerConfig()
    config.debug.aclgraph.check_passes = True
    backend = npu_compile.get_npu_backend(compiler_config=config)
    return backend, backend


def _inference(case: Case, compiled: Callable[..., Any], model: Any, check: _Comparison) -> None:
    first, other = case.lengths
    with torch.no_grad():
        for seed, length in enumerate((first, first, first, other)):
            if seed in (1, 3):  # warm after the first call; the new length ends it
                check.steady()
            inputs = case.inputs(length, seed)
            expected = model(**inputs)
            check(f"call {seed}", expected, compiled(**inputs))


def _autocast(case: Case, compiled: Callable[..., Any], model: Any, check: _Comparison) -> None:
    """Inference under autocast: eager and the compiled model each under the same autocast."""
    dtype = AUTOCAST[check.mode]
    device = next(model.parameters()).device.type
    with torch.autocast(device, dtype=dtype):
        _inference(case, compiled, model, check)


def _training(
    case: Case, compiled: Callable[..., Any], model: Any, check: _Comparison, steps: int = 2
) -> None:
    reference = copy.deepcopy(model)
    for step in range(steps):
        if step == 1:  # the first step captured the forward and the backward
            check.steady()
        inputs = case.inputs(case.lengths[0], step)
        expected = _loss(reference(**inputs))
        expected.backward()
        loss = _loss(compiled(**inputs))
        loss.backward()
        check(f"step {step} loss", expected, loss)
        _compare_gradients(reference, model, check, step)
        buffers = dict(reference.named_buffers())
        for name, buffer in model.named_buffers():
            check(f"step {step} buffer {name}", buffers[name], buffer)
        for module in (reference, model):
            module.zero_grad(set_to_none=True)
        # Hold no output into the next step, as a training loop does not: an output still held
        # is in use, and the next call would capture on a second call path, not replay.
        del expected, loss


def _compare_gradients(reference: Any, model: Any, check: _Comparison, step: int) -> None:
    """Every parameter's gradient against eager's (in a function: none is held afterwards)."""
    mine = dict(reference.named_parameters())
    for name, parameter in model.named_parameters():
        if mine[name].grad is None and parameter.grad is None:
            continue
        # A parameter nothing used: eager leaves its gradient None, a compiled backward may give
        # zeros. The same gradient either way.
        expected_grad = mine[name].grad
        if expected_grad is None:
            expected_grad = torch.zeros_like(parameter)
        got_grad = parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)
        check(f"step {step} grad {name}", expected_grad, got_grad)


_BODIES = {
    "inference": _inference,
    "training": _training,
    **dict.fromkeys(AUTOCAST, _autocast),
}


def first_line(error: BaseException) -> str:
    """The first line of ``error`` as Python prints it (``Type: message``), at most 300 chars."""
    lines = traceback.format_exception_only(type(error), error)
    first = lines[0].strip().splitlines()[0] if lines else type(error).__name__
    return first[:300]


def settle(outcome: Outcome, fallbacks: list[str], splits: list[str]) -> None:
    """A pass becomes ``fallback`` or ``pieces`` where graphs ran eagerly or were split.

    A graph that ran eagerly gave eager's numbers by construction: the pass says nothing about
    the backend then, and the outcome names why it did not capture instead.
    """
    if outcome.result == "pass" and fallbacks:
        outcome.result, outcome.detail = "fallback", "; ".join(sorted(set(fallbacks)))[:400]
    elif outcome.result == "pass" and splits:
        outcome.result, outcome.detail = "pieces", "; ".join(sorted(set(splits)))[:400]


def run(case: Case, mode: str, backend_name: str, seed: int = 0) -> Outcome:
    """Run ``case`` one way (``mode``, ``backend_name``) against eager."""
    torch._dynamo.reset()
    outcome = Outcome()
    check = _Comparison(TOLERANCE[mode], mode)
    backend, ours = _backend(backend_name)
    from _accuracy_models import build

    try:
        model = build(case, seed)
        model = model.train() if mode == "training" else model.eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(model, backend=backend)
            _BODIES[mode](case, compiled, model, check)
    except _Wrong as wrong:
        outcome.result, outcome.detail = "wrong", str(wrong)
    except Exception as error:
        outcome.result, outcome.detail = "error", first_line(error)
    outcome.worst = check.worst if check.compared else None
    outcome.where = check.where
    if ours is not None:
        stats = ours.stats
        outcome.graphs = {
            "fx_graphs": stats.fx_graphs,
            "captured": stats.captured,
            "eager": stats.eager,
            "fallbacks": len(stats.fallbacks),
            "pieces": stats.piecewise,
        }
        outcome.whole = bool(stats.captured) and not stats.fallbacks and not stats.piecewise
        outcome.steady = check.steady_calls()
        settle(
            outcome,
            [f"{stats.fallback_reasons[g]}: {m}" for g, m in stats.fallbacks],
            [s for parts in stats.splits.values() for s in parts],
        )
    torch._dynamo.reset()
    return outcome
