"""Stock Hugging Face models (tiny random configs, never downloaded) export unmodified.

Each model is exported once per module (static and dynamic), called the way users call it:
``dynamo_export(model=m, input_ids=..., attention_mask=..., use_cache=False)``. The numpy
runtime must match eager, with and without padding in a 2-D attention mask.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from npu_graph_export import ExportError, dynamo_export, runtime
from npu_graph_export._proto import ge_ir_pb2 as ge

transformers = pytest.importorskip("transformers")

VOCAB = 100


def _configs() -> dict[str, Callable[[], torch.nn.Module]]:
    t = transformers
    common: dict[str, Any] = {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    }
    return {
        "gpt2": lambda: t.GPT2LMHeadModel(
            t.GPT2Config(
                vocab_size=VOCAB,
                n_embd=32,
                n_layer=2,
                n_head=4,
                n_positions=64,
                bos_token_id=0,
                eos_token_id=0,
            )
        ),
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**common, num_key_value_heads=2)),
        "qwen2": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**common, num_key_value_heads=2)),
        "mistral": lambda: t.MistralForCausalLM(t.MistralConfig(**common, num_key_value_heads=2)),
        "phi3": lambda: t.Phi3ForCausalLM(
            t.Phi3Config(**common, num_key_value_heads=2, pad_token_id=0, eos_token_id=1)
        ),
        "gemma2": lambda: t.Gemma2ForCausalLM(
            t.Gemma2Config(**common, num_key_value_heads=2, head_dim=8)
        ),
        "opt": lambda: t.OPTForCausalLM(
            t.OPTConfig(
                vocab_size=VOCAB,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                ffn_dim=64,
                max_position_embeddings=64,
                word_embed_proj_dim=32,
            )
        ),
        "bert": lambda: t.BertModel(
            t.BertConfig(
                vocab_size=VOCAB,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=64,
                max_position_embeddings=64,
            )
        ),
    }


MODELS = list(_configs())


def _build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # config notes about token ids outside a tiny vocab
        return _configs()[name]().eval()


def _inputs(batch: int, seq: int, *, pad: int = 0, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch, seq), generator=generator)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, :pad] = 0  # left padding in the last row
    return {"input_ids": ids, "attention_mask": mask}


def _extra(name: str) -> dict[str, Any]:
    return {} if name == "bert" else {"use_cache": False}


def _eager(model: torch.nn.Module, name: str, inputs: dict[str, torch.Tensor]) -> np.ndarray:
    with torch.no_grad():
        out = model(**inputs, **_extra(name))
    return np.asarray(out[0].numpy())


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, bool], Path]:
    cache: dict[tuple[str, bool], Path] = {}

    def get(name: str, dynamic: bool) -> Path:
        if (name, dynamic) not in cache:
            path = tmp_path_factory.mktemp(f"{name}-{dynamic}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dynamo_export(
                    model=_build(name),
                    export_path=path,
                    dynamic=dynamic,
                    **_inputs(2, 8, pad=3),
                    **_extra(name),
                )
            cache[(name, dynamic)] = path
        return cache[(name, dynamic)]

    return get


def _check(path: Path, name: str, inputs: dict[str, torch.Tensor]) -> None:
    model = runtime.load(path)
    assert [info.name for info in model.inputs] == ["input_ids", "attention_mask"]
    got = model.run(inputs["input_ids"].numpy(), inputs["attention_mask"].numpy())[0]
    expected = _eager(_build(name), name, inputs)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_static_export_matches_eager_with_padded_mask(
    exported: Callable[[str, bool], Path], name: str, ge_check: Callable[[ge.GraphDef], set[str]]
) -> None:
    path = exported(name, False)
    _check(path, name, _inputs(2, 8, pad=3, seed=1))
    _check(path, name, _inputs(2, 8, seed=2))  # no padding: an all-ones mask
    graph = ge.ModelDef()
    graph.ParseFromString((path / "export.air").read_bytes())
    ge_check(graph.graph[0])


@pytest.mark.parametrize("name", MODELS)
def test_dynamic_export_runs_other_batch_and_length(
    exported: Callable[[str, bool], Path], name: str
) -> None:
    path = exported(name, True)
    model = runtime.load(path)
    assert all(info.shape == (-1, -1) for info in model.inputs)
    _check(path, name, _inputs(3, 5, pad=2, seed=3))
    _check(path, name, _inputs(1, 11, seed=4))


def test_export_without_attention_mask(tmp_path: Path) -> None:
    ids = _inputs(2, 6, seed=5)["input_ids"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamo_export(model=_build("qwen2"), export_path=tmp_path, input_ids=ids, use_cache=False)
    loaded = runtime.load(tmp_path)
    assert [info.name for info in loaded.inputs] == ["input_ids"]
    (got, *_) = loaded.run(ids.numpy())
    with torch.no_grad():
        expected = _build("qwen2")(input_ids=ids, use_cache=False)[0].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_static_cache_decode_steps_update_ref_data_caches(
    tmp_path: Path, ge_check: Callable[[ge.GraphDef], set[str]]
) -> None:
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    def wrapped() -> torch.nn.Module:
        model = _build("llama")
        model.generation_config.use_cache = True
        model.generation_config.cache_implementation = "static"
        return TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=8)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamo_export(
            model=wrapped(),
            export_path=tmp_path,
            input_ids=torch.tensor([[5]]),
            cache_position=torch.tensor([0]),
        )
    graph = ge.ModelDef()
    graph.ParseFromString((tmp_path / "export.air").read_bytes())
    assert {"RefData", "Assign", "TensorScatterUpdate"} <= ge_check(graph.graph[0])
    loaded = runtime.load(tmp_path)
    names = [info.name for info in loaded.inputs]
    assert names[:2] == ["input_ids", "cache_position"]
    assert "b_key_cache_0" in names
    # The caches are the caller's arrays, updated in place at every step.
    state = [np.zeros(info.shape, info.numpy_dtype) for info in loaded.inputs[2:]]
    eager = wrapped()
    for step, token in enumerate([5, 17, 42]):
        ids, position = np.array([[token]]), np.array([step])
        (got,) = loaded.run(ids, position, *state)
        with torch.no_grad():
            expected = eager(input_ids=torch.tensor(ids), cache_position=torch.tensor(position))
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)
    keys = state[names.index("b_key_cache_0") - 2]
    assert np.abs(keys[:, :, :3]).sum() > 0
    assert not keys[:, :, 3:].any()


def test_returned_kv_cache_object_asks_for_use_cache_false(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="use_cache=False"):
        dynamo_export(model=_build("llama"), export_path=tmp_path / "out", **_inputs(1, 4))
    assert not (tmp_path / "out").exists()
