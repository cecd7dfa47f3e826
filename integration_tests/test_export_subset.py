"""The export sweep's CI subset: a model of each kind, through the sweep's own code.

``nox -s export-sweep`` exports every model of PyTorch's Hugging Face list and of the vision
list, static and (causal LMs) with ``dynamic=True``, and runs each through the numpy runtime
against eager (``docs/export.md``). CI runs this subset, chosen for the operators they need and
the time they take: a classifier that picks a token by argmax, an encoder-decoder that repeats
positions, windowed attention with padding and strided views, group norm, weight
standardisation, Fourier mixing, and a mixture of experts with dynamic shapes. It also checks
that the tolerance catches an approximation and that a refusal keeps torch's cause.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import export_sweep
from _accuracy_models import HF, VISION
from _export_sweep import EXPORT_VISION, TOLERANCE, causal_lm, run

CASES = {case.name: case for case in HF + EXPORT_VISION}

SUBSET = [
    ("GPT2ForSequenceClassification", False),  # argmax over the last real token
    ("openai/whisper-tiny", False),  # repeat
    ("Swin", False),  # constant padding, as_strided
    ("PoolFormer", False),  # group norm
    ("BiT", False),  # weight standardisation, group norm, padding
    ("GoogleFnet", False),  # FFT
    ("openai/gpt-oss-20b", True),  # top-k, sort, histc, grouped matmul, dynamic shapes
]


@pytest.mark.parametrize(("name", "dynamic"), SUBSET)
def test_the_subset_exports_and_equals_eager(name: str, dynamic: bool) -> None:
    outcome = run(CASES[name], dynamic=dynamic)
    assert outcome.result == "pass", outcome
    assert outcome.worst is not None  # something was compared
    assert outcome.ops > 0


def test_the_lists_are_the_accuracy_sweeps_and_two_more() -> None:
    hf = [case.name for case in HF]
    assert len(hf) == len(set(hf)) == 55
    assert [case.name for case in EXPORT_VISION[: len(VISION)]] == [c.name for c in VISION]
    assert [case.name for case in EXPORT_VISION[len(VISION) :]] == ["BiT", "SwinV2"]
    causal = {case.name for case in HF if causal_lm(case)}
    assert {"DistillGPT2", "meta-llama/Llama-3.2-1B", "openai/gpt-oss-20b"} <= causal
    assert not causal & {"BertForMaskedLM", "T5Small", "openai/whisper-tiny"}


def test_an_approximation_is_a_wrong_number(monkeypatch: pytest.MonkeyPatch) -> None:
    # An exact GELU computed in its tanh form: about 3e-5 off, past the tolerance.
    from npu_graph_export.runtime._kernels import KERNELS, elementwise

    monkeypatch.setitem(KERNELS, "GeluV2", lambda op, xs, _: [elementwise._gelu_tanh(xs[0])])
    outcome = run(CASES["BertForMaskedLM"])
    assert outcome.result == "wrong", outcome
    assert outcome.worst is not None
    assert TOLERANCE < outcome.worst < 1e-4
    assert "logits" in outcome.where


def test_a_data_dependent_refusal_is_one_line_with_torch_s_cause() -> None:
    outcome = run(CASES["AllenaiLongformerBase"])
    assert outcome.result == "refused"
    assert outcome.kind == "DataDependentControlFlowError"
    assert "\n" not in outcome.detail
    assert "Caused by: if is_global_attn:" in outcome.detail
    assert "modeling_longformer.py:" in outcome.detail


def _row(name: str, suite: str, **ways: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "suite": suite, "code": "abc", **ways}


def _outcome(result: str, detail: str = "", worst: float | None = 1e-7) -> dict[str, Any]:
    return {"result": result, "detail": detail, "worst": worst, "where": "", "ops": 3, "kind": ""}


def test_the_table_counts_each_list_and_judges_the_goals() -> None:
    rows = [
        _row("A", "hf", static=_outcome("pass"), dynamic=_outcome("pass")),
        _row("B", "hf", static=_outcome("refused", "1 ATen op cannot be exported (1 node): x")),
        _row("C", "vision", static=_outcome("wrong", "out: off by 1e-3 of its scale")),
        {"name": "D", "suite": "hf", "code": "abc", "crashed": "killed", "ways": ["static"]},
    ]
    table = export_sweep._markdown(rows)
    assert "| PyTorch's HF list, static | 3 | 1 | 0 | 1 | 1 |" in table
    assert "| vision list, static | 1 | 0 | 1 | 0 | 0 |" in table
    assert "| causal LMs, `dynamic=True` | 1 | 1 | 0 | 0 | 0 |" in table
    assert "- **not met**: no wrong number (C (static))" in table
    assert "- **not met**: at least 95% of the two lists export" in table
    assert "**error**: the process died (killed)" in table
    passing = [_row(str(i), "hf", static=_outcome("pass")) for i in range(20)]
    assert "- met: at least 95%" in export_sweep._markdown(passing)
