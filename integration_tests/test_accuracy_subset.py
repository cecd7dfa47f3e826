"""The accuracy sweeps' CI subset: a few models of each kind, through the sweep's own code.

``nox -s accuracy`` runs every model of PyTorch's Hugging Face list and of the vision list, two
ways, with npu_compile and ``aot_eager`` (``docs/accuracy.md``). CI runs this subset, chosen for
its kinds and for the time it takes: an encoder with a question-answering head, a decoder and a
convolution net whose batch norm trains, each in inference and in training, an encoder-decoder
in inference and the convolution net under bfloat16 autocast (``hf/test_hf_training.py`` trains
seven encoder-decoders and decoders through the same code). Each runs with npu_compile and the
differential check of its passes on, must equal eager and, in inference, be captured whole.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _accuracy import MODES, _Comparison, run
from _accuracy_models import HF, VISION, build

SUBSET = [
    *(
        (name, mode)
        for name in ("DistilBertForQuestionAnswering", "meta-llama/Llama-3.2-1B", "ResNet")
        for mode in MODES
    ),
    ("BlenderbotSmallForConditionalGeneration", "inference"),
    ("ResNet", "autocast_bf16"),
]
CASES = {case.name: case for case in HF + VISION}


@pytest.mark.parametrize(("name", "mode"), SUBSET)
def test_the_subset_equals_eager(name: str, mode: str) -> None:
    outcome = run(CASES[name], mode, "npu_compile")
    assert outcome.result == "pass", outcome
    assert outcome.worst is not None  # something was compared
    if mode != "training":
        assert outcome.whole, outcome.graphs


def test_the_lists_are_pytorch_s_and_every_model_builds() -> None:
    hf = [case.name for case in HF]
    assert len(hf) == len(set(hf)) == 55
    assert {"BartForCausalLM", "openai/whisper-tiny", "YituTechConvBert"} <= set(hf)
    assert len(VISION) >= 12
    for case in HF + VISION:
        model = build(case)
        assert sum(p.numel() for p in model.parameters()) < 2_000_000, case.name  # small


def test_a_difference_beyond_the_tolerance_is_a_wrong_number_with_its_place() -> None:
    check = _Comparison(1e-4)
    reference = {"logits": torch.ones(4)}
    check("call 0", reference, {"logits": torch.ones(4) * (1 + 5e-5)})
    with pytest.raises(Exception, match=r"call 1\.logits: off by 2\.00e-04"):
        check("call 1", reference, {"logits": torch.ones(4) * (1 + 2e-4)})
    assert check.where == "call 1.logits"
    with pytest.raises(Exception, match="off by inf"):
        check("call 2", reference, {"logits": torch.full((4,), float("nan"))})
