"""One model of the accuracy sweeps, run one way against eager: its outcome.

:func:`run` compiles a model of ``_accuracy_models`` with one backend and compares it with eager:

* inference: ``eval()``, ``torch.no_grad()``, three calls at one length and one at another,
  every output tensor compared;
* training: ``train()``, two steps of forward and backward, the loss, every parameter's
  gradient and every buffer (batch norm's running statistics) compared after each step.

The backends: ``npu_compile`` (default options, with ``debug.aclgraph.check_passes`` on, so a pass
that changes a value raises naming itself) and torch's ``aot_eager``, which tells torch's own
limits from ours. The outcome is one of ``pass``, ``wrong`` (with how far off and where),
``fallback`` or ``pieces`` (with the reasons the backend recorded) and ``error`` (its first
line); for npu_compile it also says whether every graph was captured whole.
"""

from __future__ import annotations

import copy
import dataclasses
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import npu_compile
import torch
from _accuracy_models import Case, build

__all__ = ["BACKENDS", "MODES", "TOLERANCE", "Outcome", "run"]

#: The largest difference allowed, relative to the largest value of the reference tensor.
TOLERANCE = {"inference": 1e-4, "training": 1e-3}
MODES = ("inference", "training")
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
    """

    result: str = "pass"
    detail: str = ""
    worst: float | None = None
    where: str = ""
    graphs: dict[str, int] = dataclasses.field(default_factory=dict)
    whole: bool | None = None


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


class _Comparison:
    def __init__(self, tolerance: float) -> None:
        self.tolerance = tolerance
        self.worst = 0.0
        self.where = ""
        self.compared = 0

    def __call__(self, name: str, reference: Any, got: Any) -> None:
        expected = dict(_leaves(reference, name))
        actual = dict(_leaves(got, name))
        if expected.keys() != actual.keys():
            raise _Wrong(f"{name}: outputs {sorted(actual)} instead of {sorted(expected)}")
        for key, ref in expected.items():
            value = actual[key]
            if ref.shape != value.shape:
                raise _Wrong(f"{key}: shape {tuple(value.shape)} instead of {tuple(ref.shape)}")
            if not ref.is_floating_point():
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
            inputs = case.inputs(length, seed)
            expected = model(**inputs)
            check(f"call {seed}", expected, compiled(**inputs))


def _training(case: Case, compiled: Callable[..., Any], model: Any, check: _Comparison) -> None:
    reference = copy.deepcopy(model)
    for step in range(2):
        inputs = case.inputs(case.lengths[0], step)
        expected = _loss(reference(**inputs))
        expected.backward()
        loss = _loss(compiled(**inputs))
        loss.backward()
        check(f"step {step} loss", expected, loss)
        mine = dict(reference.named_parameters())
        for name, parameter in model.named_parameters():
            if mine[name].grad is None and parameter.grad is None:
                continue
            # A parameter nothing used: eager leaves its gradient None, a compiled backward may
            # give zeros. The same gradient either way.
            expected_grad = mine[name].grad
            if expected_grad is None:
                expected_grad = torch.zeros_like(parameter)
            got_grad = parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)
            check(f"step {step} grad {name}", expected_grad, got_grad)
        buffers = dict(reference.named_buffers())
        for name, buffer in model.named_buffers():
            check(f"step {step} buffer {name}", buffers[name], buffer)
        for module in (reference, model):
            module.zero_grad(set_to_none=True)


def run(case: Case, mode: str, backend_name: str, seed: int = 0) -> Outcome:
    """Run ``case`` one way (``mode``, ``backend_name``) against eager."""
    torch._dynamo.reset()
    outcome = Outcome()
    check = _Comparison(TOLERANCE[mode])
    backend, ours = _backend(backend_name)
    try:
        model = build(case, seed)
        model = model.eval() if mode == "inference" else model.train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(model, backend=backend)
            (_inference if mode == "inference" else _training)(case, compiled, model, check)
    except _Wrong as wrong:
        outcome.result, outcome.detail = "wrong", str(wrong)
    except Exception as error:
        lines = traceback.format_exception_only(type(error), error)
        first = lines[0].strip().splitlines()[0] if lines else type(error).__name__
        outcome.result, outcome.detail = "error", first[:300]
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
        if outcome.result == "pass" and stats.fallbacks:
            reasons = sorted({f"{stats.fallback_reasons[g]}: {m}" for g, m in stats.fallbacks})
            outcome.result, outcome.detail = "fallback", "; ".join(reasons)[:400]
        elif outcome.result == "pass" and stats.piecewise:
            splits = sorted({s for parts in stats.splits.values() for s in parts})
            outcome.result, outcome.detail = "pieces", "; ".join(splits)[:400]
    torch._dynamo.reset()
    return outcome
