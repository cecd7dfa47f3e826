"""``examples/demo_decoder.py`` is the model ``npu-compile demo`` runs, written out for users.

The command line keeps its own copy in the package (``npu_compile._tools.demo_model``: it must work
from an installed wheel, which has no ``examples/``); this test fails when the two drift apart.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch
from npu_compile.tools import DemoConfig, TinyDecoder, greedy_generate

ROOT = Path(__file__).resolve().parent.parent


def _example() -> ModuleType:
    path = ROOT / "examples" / "demo_decoder.py"
    spec = importlib.util.spec_from_file_location("demo_decoder_example", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_the_example_is_the_demo_model() -> None:
    example = _example()
    assert example.PROMPT_LENGTH == 8
    shape = {"layers": 2, "dim": 32, "max_seq": 24}
    ours = TinyDecoder(DemoConfig(**shape)).eval()
    theirs = example.TinyDecoder(example.DemoConfig(**shape)).eval()
    # The same defaults, parameters, buffers and weights for the same seed.
    assert vars(example.DemoConfig()) == vars(DemoConfig())
    mine, shown = ours.state_dict(), theirs.state_dict()
    assert list(mine) == list(shown)
    for name, tensor in mine.items():
        assert torch.equal(tensor, shown[name]), name
    assert torch.equal(ours.prompt(), theirs.prompt())
    # The same tokens from greedy decoding, step by step through the static cache.
    prompt = ours.prompt()
    expected, _ = greedy_generate(ours, ours, prompt, 6)
    assert torch.equal(example.greedy_generate(theirs, theirs, prompt, 6), expected)
