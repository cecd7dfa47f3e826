"""One model of the export sweep, exported one way and run by the numpy runtime: its outcome.

:func:`run` builds a model of ``_accuracy_models`` in ``eval()``, exports it with
``npu_graph_export.dynamo_export`` (static, or ``dynamic=True``), checks that the ``.air`` parses
as a GE ``ModelDef``, runs it with the numpy reference runtime and compares every output with
eager PyTorch. A dynamic export is also run at a second length (or image size), which a static
graph cannot take.

The inputs are the ones PyTorch's harness gives the model, without its training targets
(``labels``, answer positions): an exported graph is an inference graph. Models that can return
a KV cache get ``use_cache=False``, as ``dynamo_export`` asks.

The outcome is one of ``pass`` (with the largest difference seen), ``wrong`` (how far off and
where), ``refused`` (the exporter's one-line refusal: an op without a GE converter, a
data-dependent branch, a graph break) and ``error`` (something that should not fail did: the
exporter crashed, the ``.air`` does not parse, the runtime failed on it).
"""

from __future__ import annotations

import dataclasses
import inspect
import tempfile
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from _accuracy_models import IMAGE, VISION, Case, _pixels, _small_cnn, build

__all__ = ["EXPORT_VISION", "TOLERANCE", "TRAINING_TARGETS", "Outcome", "causal_lm", "run"]

#: The vision list of the accuracy sweeps and two models of PyTorch's TIMM list it lacks, built
#: the same way: BiT (weight-standardised convolutions, group norm) and Swin V2 (cosine
#: attention, log-spaced position biases).
EXPORT_VISION: tuple[Case, ...] = (
    *VISION,
    Case(
        "BiT",
        "vision",
        lambda: transformers.BitForImageClassification(
            _small_cnn(
                transformers.BitConfig(),
                embedding_size=16,
                hidden_sizes=[16, 32, 48, 64],
                depths=[1, 1, 1, 1],
                num_groups=8,
            )
        ),
        _pixels,
        (IMAGE, IMAGE // 2),
    ),
    Case(
        "SwinV2",
        "vision",
        lambda: transformers.Swinv2ForImageClassification(
            _small_cnn(
                transformers.Swinv2Config(),
                image_size=IMAGE,
                patch_size=4,
                embed_dim=16,
                depths=[1, 1],
                num_heads=[2, 2],
                window_size=4,
            )
        ),
        _pixels,
        (IMAGE, IMAGE // 2),
    ),
)

#: The largest difference allowed, relative to the largest value of the reference tensor. The
#: runtime computes in float32 as eager does, only in another order (about 1e-6 here); an exact
#: GELU replaced by its tanh form is off by about 3e-5, which this catches.
TOLERANCE = 1e-5

#: Inputs that make a model compute its training loss, left out of an inference export.
TRAINING_TARGETS = ("labels", "start_positions", "end_positions")


@dataclasses.dataclass
class Outcome:
    """What one model did one way.

    Attributes:
        result: ``pass``, ``wrong``, ``refused`` or ``error``.
        detail: How far off and where (``wrong``), the refusal or failure (its first line).
        worst: The largest relative difference seen (``None`` before any comparison).
        where: The output it was seen in.
        ops: GE ops in the exported graph.
        kind: The refusal's error class (``UnsupportedOpError``, ...), for ``refused``.
        zeros: Every floating output of eager was all zeros (a model whose small random
            weights vanish): the comparison then says little about the numbers.
    """

    result: str = "pass"
    detail: str = ""
    worst: float | None = None
    where: str = ""
    ops: int = 0
    kind: str = ""
    zeros: bool = False


class _Wrong(Exception):
    pass


def causal_lm(case: Case) -> bool:
    """Whether ``case`` is a causal language model (exported ``dynamic=True`` as well)."""
    if case.suite != "hf":
        return False
    model = build(case)
    names = set(transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    return type(model).__name__ in names


def _inputs(case: Case, model: torch.nn.Module, length: int, seed: int) -> dict[str, Any]:
    inputs = {k: v for k, v in case.inputs(length, seed).items() if k not in TRAINING_TARGETS}
    parameters = inspect.signature(model.forward).parameters
    takes_any = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    if "use_cache" in parameters or (takes_any and hasattr(model.config, "use_cache")):
        inputs["use_cache"] = False
    return inputs


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    """The output tensors in the order ``torch.export`` flattens them (the graph's outputs)."""
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, (transformers.utils.ModelOutput, Mapping)):
        for key, item in value.items():
            yield from _leaves(item, f"{prefix}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{prefix}[{index}]")


def _compare(call: str, expected: Any, got: list[np.ndarray], outcome: Outcome) -> bool:
    """Compare one call's outputs; return whether every floating one of eager's was all zeros."""
    reference = list(_leaves(expected, call))
    if len(reference) != len(got):
        raise _Wrong(f"{call}: {len(got)} outputs instead of {len(reference)}")
    zeros = True
    for (name, ref), value in zip(reference, got, strict=True):
        want = ref.detach().numpy()
        if want.shape != value.shape:
            raise _Wrong(f"{name}: shape {value.shape} instead of {want.shape}")
        if want.dtype != value.dtype:
            raise _Wrong(f"{name}: dtype {value.dtype} instead of {want.dtype}")
        if want.dtype.kind != "f":
            if not np.array_equal(want, value):
                outcome.worst, outcome.where = float("inf"), name
                raise _Wrong(f"{name}: integer values differ")
            outcome.worst = outcome.worst or 0.0
            continue
        zeros = zeros and not want.any()
        scale = float(np.abs(want).max(initial=0.0)) or 1.0
        with np.errstate(invalid="ignore"):
            off = float(np.abs(want.astype(np.float64) - value).max(initial=0.0)) / scale
        if off != off:  # NaN where eager has a number
            off = float("inf")
        if outcome.worst is None or off > outcome.worst:
            outcome.worst, outcome.where = off, name
        if off > TOLERANCE:
            raise _Wrong(f"{name}: off by {off:.2e} of its scale")
    return zeros


def _first_line(error: BaseException) -> str:
    lines = traceback.format_exception_only(type(error), error)
    text = "".join(lines).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:600]


def run(case: Case, dynamic: bool = False, seed: int = 0) -> Outcome:
    """Export ``case`` (static or ``dynamic``), run it with the numpy runtime, compare to eager.

    A model whose outputs are all zeros in eager (small random weights that vanish through
    many normalised layers) is exported once more with ``output_hidden_states=True``, so that
    its intermediate values are compared too.
    """
    torch._dynamo.reset()
    model = build(case, seed).eval()
    outcome = _export_and_compare(case, model, dynamic, seed, {})
    if outcome.result == "pass" and outcome.zeros and _takes(model, "output_hidden_states"):
        deeper = _export_and_compare(case, model, dynamic, seed, {"output_hidden_states": True})
        # Kept when it compared real numbers (a refusal of the longer outputs says nothing).
        if deeper.result == "wrong" or (deeper.result == "pass" and not deeper.zeros):
            outcome = deeper
            outcome.detail = outcome.detail or "with output_hidden_states=True"
    torch._dynamo.reset()
    return outcome


def _takes(model: torch.nn.Module, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def _export_and_compare(
    case: Case, model: torch.nn.Module, dynamic: bool, seed: int, extra: dict[str, Any]
) -> Outcome:
    import npu_graph_export
    from npu_graph_export import runtime
    from npu_graph_export._proto import ge_ir_pb2 as ge

    outcome = Outcome()
    first, other = case.lengths
    lengths = (first, other) if dynamic and other != first else (first,)
    with tempfile.TemporaryDirectory() as scratch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = Path(scratch) / "export"
        try:
            npu_graph_export.dynamo_export(
                model=model,
                export_path=path,
                dynamic=dynamic,
                **_inputs(case, model, first, seed),
                **extra,
            )
        except (
            npu_graph_export.UnsupportedOpError,
            npu_graph_export.GraphBreakError,
        ) as refusal:
            # All of it: a refusal of several lines breaks a goal, and the table shows it.
            outcome.result, outcome.kind = "refused", type(refusal).__name__
            outcome.detail = refusal.message[:3000]
            return outcome
        except Exception as error:
            outcome.result, outcome.detail = "error", f"export: {_first_line(error)}"
            return outcome
        try:
            parsed = ge.ModelDef()
            parsed.ParseFromString((path / "export.air").read_bytes())
            outcome.ops = len(parsed.graph[0].op)
            loaded = runtime.load(path)
            zeros = []
            for call, length in enumerate(lengths):
                inputs = {**_inputs(case, model, length, seed + call), **extra}
                arrays = [inputs[info.name].numpy() for info in loaded.inputs]
                with torch.no_grad():
                    expected = model(**inputs)
                zeros.append(_compare(f"call {call}", expected, loaded.run(*arrays), outcome))
            outcome.zeros = all(zeros)
        except _Wrong as wrong:
            outcome.result, outcome.detail = "wrong", str(wrong)
        except Exception as error:
            outcome.result, outcome.detail = "error", f"runtime: {_first_line(error)}"
    return outcome
