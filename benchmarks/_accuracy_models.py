"""The models of the accuracy sweeps, each built offline from a small config (never downloaded).

Two lists. ``HF``: PyTorch's Hugging Face benchmark list (``benchmarks/dynamo/
huggingface_models_list.txt`` in the PyTorch repository, the 55 models torch judges every
``torch.compile`` backend by), each mapped to the ``transformers`` class PyTorch's harness builds
for it. ``VISION``: ``transformers`` image models that stand for PyTorch's TIMM list (residual and
mobile convolution nets with batch norm, transformers with and without windows, hybrids).

Every config is shrunk the same way (:func:`shrink`: width 64, 2 layers, 4 heads, vocabulary 256,
no dropout), with a few per-model settings where a model's own sizes must agree. A model is built
by :func:`build` with the inputs PyTorch's harness gives it: token ids and labels, decoder ids for
encoder-decoders, boxes for LayoutLM, mel features for Whisper, pixels for the vision models.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import transformers as tf

__all__ = ["HF", "VISION", "Case", "build", "select", "shrink"]

VOCAB = 256
WIDTH = 64
LAYERS = 2
HEADS = 4
BATCH = 2
TOKENS = 32
IMAGE = 64

#: Attribute names that hold the same size in different configs.
_SIZES: dict[str, object] = {
    "vocab_size": VOCAB,
    "hidden_size": WIDTH,
    "d_model": WIDTH,
    "n_embd": WIDTH,
    "dim": WIDTH,
    "num_attention_heads": HEADS,
    "n_head": HEADS,
    "n_heads": HEADS,
    "num_heads": HEADS,
    "encoder_attention_heads": HEADS,
    "decoder_attention_heads": HEADS,
    "num_key_value_heads": 2,
    "num_hidden_layers": LAYERS,
    "n_layer": LAYERS,
    "n_layers": LAYERS,
    "num_layers": LAYERS,
    "encoder_layers": LAYERS,
    "decoder_layers": LAYERS,
    "num_decoder_layers": LAYERS,
    "intermediate_size": 2 * WIDTH,
    "encoder_ffn_dim": 2 * WIDTH,
    "decoder_ffn_dim": 2 * WIDTH,
    "d_ff": 2 * WIDTH,
    "d_inner": 2 * WIDTH,
    "hidden_dim": 2 * WIDTH,
    "n_inner": 2 * WIDTH,
    "max_position_embeddings": 128,
    "n_positions": 128,
    "max_target_positions": 128,
}


def shrink(config: Any, **overrides: Any) -> Any:
    """``config`` made small: the sizes above where it has them, no dropout, then ``overrides``."""
    for name, value in _SIZES.items():
        try:
            current = getattr(config, name, None)
        except NotImplementedError:  # XLNet refuses to name a length limit it does not have
            continue
        # Not where the config holds a list (a size per stage of a vision model).
        if current is not None and not isinstance(current, (list, tuple)):
            with contextlib.suppress(NotImplementedError):
                setattr(config, name, value)
    for name in list(vars(config)):
        # Every kind of dropout: of activations, of whole layers (layerdrop, random per call in
        # Python) and of paths (stochastic depth): eager and a compiled model would draw apart.
        value = getattr(config, name)
        if "drop" not in name.lower():
            continue
        if isinstance(value, float):
            setattr(config, name, 0.0)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, float) for v in value):
            setattr(config, name, type(value)(0.0 for _ in value))
    if hasattr(config, "head_dim") and getattr(config, "head_dim", None):
        config.head_dim = WIDTH // HEADS
    layer_types = getattr(config, "layer_types", None)
    if isinstance(layer_types, list) and layer_types:
        config.layer_types = (layer_types * LAYERS)[:LAYERS]
    for name, value in overrides.items():
        setattr(config, name, value)
    return config


@dataclasses.dataclass(frozen=True)
class Case:
    """One model of a list: how to build it and its inputs.

    Attributes:
        name: Its name in the list.
        suite: ``"hf"`` or ``"vision"``.
        make: Builds the model (random weights, seeded by the caller).
        inputs: Builds keyword inputs for one call, at a length (or image size) and a seed.
        lengths: The length of the first calls, then the new one.
    """

    name: str
    suite: str
    make: Callable[[], torch.nn.Module]
    inputs: Callable[[int, int], dict[str, Any]]
    lengths: tuple[int, int] = (TOKENS, TOKENS // 2)


def _ids(length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (BATCH, length), generator=generator)


def _lm(length: int, seed: int) -> dict[str, torch.Tensor]:
    ids = _ids(length, seed)
    return {"input_ids": ids, "labels": ids.clone()}


def _plain(length: int, seed: int) -> dict[str, torch.Tensor]:
    return {"input_ids": _ids(length, seed)}


def _qa(length: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed + 1)
    return {
        "input_ids": _ids(length, seed),
        "start_positions": torch.randint(0, length, (BATCH,), generator=generator),
        "end_positions": torch.randint(0, length, (BATCH,), generator=generator),
    }


def _classify(length: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed + 1)
    return {
        "input_ids": _ids(length, seed),
        "labels": torch.randint(0, 2, (BATCH,), generator=generator),
    }


def _seq2seq(length: int, seed: int) -> dict[str, torch.Tensor]:
    ids = _ids(length, seed)
    target = _ids(length, seed + 7)
    return {"input_ids": ids, "decoder_input_ids": target, "labels": target.clone()}


def _layout(length: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed + 1)
    corners = torch.randint(0, 500, (BATCH, length, 2), generator=generator)
    box = torch.cat([corners, corners + 100], dim=-1)
    return {**_lm(length, seed), "bbox": box}


def _layout_classify(length: int, seed: int) -> dict[str, torch.Tensor]:
    return {**_classify(length, seed), "bbox": _layout(length, seed)["bbox"]}


def _whisper(length: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    # Whisper's encoder takes exactly 2 x max_source_positions frames; the decoder varies.
    features = torch.randn(BATCH, 80, 64, generator=generator)
    target = _ids(length, seed + 7)
    return {"input_features": features, "decoder_input_ids": target, "labels": target.clone()}


def _pixels(size: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "pixel_values": torch.randn(BATCH, 3, size, size, generator=generator),
        "labels": torch.randint(0, 10, (BATCH,), generator=generator),
    }


def _patches(size: int, seed: int) -> dict[str, Any]:
    # Position embeddings learnt for one image size: another size is interpolated, as the
    # models' own pipelines do.
    return {**_pixels(size, seed), "interpolate_pos_encoding": True}


def _model(cls: Any, config: Any) -> Callable[[], torch.nn.Module]:
    return lambda: cls(config())


def _hf(
    name: str,
    model: Any,
    config: Callable[[], Any],
    inputs: Callable[[int, int], dict[str, Any]],
    **overrides: Any,
) -> Case:
    """A model of the HF list: ``model`` on ``config()`` shrunk, with ``overrides`` last."""
    return Case(name, "hf", _model(model, lambda: shrink(config(), **overrides)), inputs)


_T5 = {"d_kv": WIDTH // HEADS, "decoder_start_token_id": 0, "pad_token_id": 0}
_GPT_NEO = {"attention_types": [[["global", "local"], 1]], "window_size": 16}
_MOBILE_BERT = {
    "embedding_size": 32,
    "intra_bottleneck_size": 32,
    "true_hidden_size": 32,
    "num_feedforward_networks": 2,
}

HF: tuple[Case, ...] = (
    _hf("AlbertForMaskedLM", tf.AlbertForMaskedLM, tf.AlbertConfig, _lm, embedding_size=32),
    _hf(
        "AlbertForQuestionAnswering",
        tf.AlbertForQuestionAnswering,
        tf.AlbertConfig,
        _qa,
        embedding_size=32,
    ),
    _hf(
        "AllenaiLongformerBase",
        tf.LongformerModel,
        tf.LongformerConfig,
        _plain,
        attention_window=[8] * LAYERS,
    ),
    _hf("BartForCausalLM", tf.BartForCausalLM, tf.BartConfig, _lm),
    _hf("BartForConditionalGeneration", tf.BartForConditionalGeneration, tf.BartConfig, _seq2seq),
    _hf("BertForMaskedLM", tf.BertForMaskedLM, tf.BertConfig, _lm),
    _hf("BertForQuestionAnswering", tf.BertForQuestionAnswering, tf.BertConfig, _qa),
    _hf("BlenderbotForCausalLM", tf.BlenderbotForCausalLM, tf.BlenderbotConfig, _lm),
    _hf(
        "BlenderbotForConditionalGeneration",
        tf.BlenderbotForConditionalGeneration,
        tf.BlenderbotConfig,
        _seq2seq,
    ),
    _hf("BlenderbotSmallForCausalLM", tf.BlenderbotSmallForCausalLM, tf.BlenderbotSmallConfig, _lm),
    _hf(
        "BlenderbotSmallForConditionalGeneration",
        tf.BlenderbotSmallForConditionalGeneration,
        tf.BlenderbotSmallConfig,
        _seq2seq,
    ),
    _hf("CamemBert", tf.CamembertForMaskedLM, tf.CamembertConfig, _lm),
    _hf("DebertaV2ForMaskedLM", tf.DebertaV2ForMaskedLM, tf.DebertaV2Config, _lm),
    _hf("DebertaV2ForQuestionAnswering", tf.DebertaV2ForQuestionAnswering, tf.DebertaV2Config, _qa),
    _hf("DistilBertForMaskedLM", tf.DistilBertForMaskedLM, tf.DistilBertConfig, _lm),
    _hf(
        "DistilBertForQuestionAnswering",
        tf.DistilBertForQuestionAnswering,
        tf.DistilBertConfig,
        _qa,
    ),
    _hf("DistillGPT2", tf.GPT2LMHeadModel, tf.GPT2Config, _lm),
    _hf("ElectraForCausalLM", tf.ElectraForCausalLM, tf.ElectraConfig, _lm, embedding_size=WIDTH),
    _hf(
        "ElectraForQuestionAnswering",
        tf.ElectraForQuestionAnswering,
        tf.ElectraConfig,
        _qa,
        embedding_size=WIDTH,
    ),
    _hf(
        "GPT2ForSequenceClassification",
        tf.GPT2ForSequenceClassification,
        tf.GPT2Config,
        _classify,
        pad_token_id=0,
    ),
    _hf("GPTJForCausalLM", tf.GPTJForCausalLM, tf.GPTJConfig, _lm, rotary_dim=8),
    _hf("GPTJForQuestionAnswering", tf.GPTJForQuestionAnswering, tf.GPTJConfig, _qa, rotary_dim=8),
    _hf("GPTNeoForCausalLM", tf.GPTNeoForCausalLM, tf.GPTNeoConfig, _lm, **_GPT_NEO),
    _hf(
        "GPTNeoForSequenceClassification",
        tf.GPTNeoForSequenceClassification,
        tf.GPTNeoConfig,
        _classify,
        pad_token_id=0,
        **_GPT_NEO,
    ),
    _hf("GoogleFnet", tf.FNetModel, tf.FNetConfig, _plain),
    _hf("LayoutLMForMaskedLM", tf.LayoutLMForMaskedLM, tf.LayoutLMConfig, _layout),
    _hf(
        "LayoutLMForSequenceClassification",
        tf.LayoutLMForSequenceClassification,
        tf.LayoutLMConfig,
        _layout_classify,
    ),
    _hf(
        "M2M100ForConditionalGeneration",
        tf.M2M100ForConditionalGeneration,
        tf.M2M100Config,
        _seq2seq,
    ),
    _hf("MBartForCausalLM", tf.MBartForCausalLM, tf.MBartConfig, _lm),
    _hf(
        "MBartForConditionalGeneration", tf.MBartForConditionalGeneration, tf.MBartConfig, _seq2seq
    ),
    _hf(
        "MT5ForConditionalGeneration", tf.MT5ForConditionalGeneration, tf.MT5Config, _seq2seq, **_T5
    ),
    _hf("MegatronBertForCausalLM", tf.MegatronBertForCausalLM, tf.MegatronBertConfig, _lm),
    _hf(
        "MegatronBertForQuestionAnswering",
        tf.MegatronBertForQuestionAnswering,
        tf.MegatronBertConfig,
        _qa,
    ),
    _hf(
        "MobileBertForMaskedLM", tf.MobileBertForMaskedLM, tf.MobileBertConfig, _lm, **_MOBILE_BERT
    ),
    _hf(
        "MobileBertForQuestionAnswering",
        tf.MobileBertForQuestionAnswering,
        tf.MobileBertConfig,
        _qa,
        **_MOBILE_BERT,
    ),
    _hf("OPTForCausalLM", tf.OPTForCausalLM, tf.OPTConfig, _lm, word_embed_proj_dim=WIDTH),
    _hf("PLBartForCausalLM", tf.PLBartForCausalLM, tf.PLBartConfig, _lm),
    _hf(
        "PLBartForConditionalGeneration",
        tf.PLBartForConditionalGeneration,
        tf.PLBartConfig,
        _seq2seq,
    ),
    _hf("PegasusForCausalLM", tf.PegasusForCausalLM, tf.PegasusConfig, _lm),
    _hf(
        "PegasusForConditionalGeneration",
        tf.PegasusForConditionalGeneration,
        tf.PegasusConfig,
        _seq2seq,
    ),
    _hf("RobertaForCausalLM", tf.RobertaForCausalLM, tf.RobertaConfig, _lm, is_decoder=True),
    _hf("RobertaForQuestionAnswering", tf.RobertaForQuestionAnswering, tf.RobertaConfig, _qa),
    _hf("T5ForConditionalGeneration", tf.T5ForConditionalGeneration, tf.T5Config, _seq2seq, **_T5),
    _hf("T5Small", tf.T5ForConditionalGeneration, tf.T5Config, _seq2seq, **_T5),
    _hf("TrOCRForCausalLM", tf.TrOCRForCausalLM, tf.TrOCRConfig, _lm),
    _hf("XGLMForCausalLM", tf.XGLMForCausalLM, tf.XGLMConfig, _lm),
    _hf("XLNetLMHeadModel", tf.XLNetLMHeadModel, tf.XLNetConfig, _lm),
    _hf("YituTechConvBert", tf.ConvBertForMaskedLM, tf.ConvBertConfig, _lm, embedding_size=WIDTH),
    _hf("meta-llama/Llama-3.2-1B", tf.LlamaForCausalLM, tf.LlamaConfig, _lm),
    _hf("google/gemma-2-2b", tf.Gemma2ForCausalLM, tf.Gemma2Config, _lm, sliding_window=16),
    _hf("google/gemma-3-4b-it", tf.Gemma3ForCausalLM, tf.Gemma3TextConfig, _lm, sliding_window=16),
    _hf(
        "openai/whisper-tiny",
        tf.WhisperForConditionalGeneration,
        tf.WhisperConfig,
        _whisper,
        max_source_positions=32,
        num_mel_bins=80,
        pad_token_id=1,
        bos_token_id=2,
        eos_token_id=2,
        decoder_start_token_id=2,
        suppress_tokens=[],
        begin_suppress_tokens=[],
    ),
    _hf("Qwen/Qwen3-0.6B", tf.Qwen3ForCausalLM, tf.Qwen3Config, _lm),
    _hf(
        "mistralai/Mistral-7B-Instruct-v0.3",
        tf.MistralForCausalLM,
        tf.MistralConfig,
        _lm,
        sliding_window=None,
    ),
    _hf(
        "openai/gpt-oss-20b",
        tf.GptOssForCausalLM,
        tf.GptOssConfig,
        _lm,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=16,
    ),
)


def _vision(
    name: str,
    model: Any,
    config: Callable[[], Any],
    inputs: Callable[[int, int], dict[str, Any]] = _pixels,
    sizes: tuple[int, int] = (IMAGE, IMAGE // 2),
) -> Case:
    return Case(name, "vision", _model(model, config), inputs, sizes)


def _small_cnn(config: Any, **overrides: Any) -> Any:
    return shrink(config, num_labels=10, **overrides)


VISION: tuple[Case, ...] = (
    _vision(
        "ResNet",
        tf.ResNetForImageClassification,
        lambda: _small_cnn(
            tf.ResNetConfig(), embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1]
        ),
    ),
    _vision(
        "RegNet",
        tf.RegNetForImageClassification,
        lambda: _small_cnn(
            tf.RegNetConfig(),
            embedding_size=16,
            hidden_sizes=[16, 32],
            depths=[1, 1],
            groups_width=8,
        ),
    ),
    _vision(
        "ConvNeXt",
        tf.ConvNextForImageClassification,
        lambda: _small_cnn(tf.ConvNextConfig(), hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
    ),
    _vision(
        "ConvNeXtV2",
        tf.ConvNextV2ForImageClassification,
        lambda: _small_cnn(
            tf.ConvNextV2Config(), hidden_sizes=[16, 32], depths=[1, 1], num_stages=2
        ),
    ),
    _vision(
        "MobileNetV1",
        tf.MobileNetV1ForImageClassification,
        lambda: _small_cnn(tf.MobileNetV1Config(), depth_multiplier=0.25),
    ),
    _vision(
        "MobileNetV2",
        tf.MobileNetV2ForImageClassification,
        lambda: _small_cnn(tf.MobileNetV2Config(), depth_multiplier=0.25),
    ),
    _vision(
        "EfficientNet",
        tf.EfficientNetForImageClassification,
        lambda: _small_cnn(
            tf.EfficientNetConfig(),
            width_coefficient=0.25,
            depth_coefficient=0.25,
            image_size=IMAGE,
            hidden_dim=320,  # the head's 1280 channels at this width
        ),
    ),
    _vision(
        "ViT",
        tf.ViTForImageClassification,
        lambda: _small_cnn(tf.ViTConfig(), image_size=IMAGE, patch_size=16),
        _patches,
    ),
    _vision(
        "DeiT",
        tf.DeiTForImageClassification,
        lambda: _small_cnn(tf.DeiTConfig(), image_size=IMAGE, patch_size=16),
        _patches,
    ),
    _vision(
        "BEiT",
        tf.BeitForImageClassification,
        lambda: _small_cnn(tf.BeitConfig(), image_size=IMAGE, patch_size=16),
    ),
    _vision(
        "Swin",
        tf.SwinForImageClassification,
        lambda: _small_cnn(
            tf.SwinConfig(),
            image_size=IMAGE,
            patch_size=4,
            embed_dim=16,
            depths=[1, 1],
            num_heads=[2, 2],
            window_size=4,
        ),
    ),
    _vision(
        "LeViT",
        tf.LevitForImageClassification,
        lambda: _small_cnn(
            tf.LevitConfig(),
            image_size=IMAGE,
            hidden_sizes=[32, 48, 64],
            num_attention_heads=[2, 2, 2],
            depths=[1, 1, 1],
            key_dim=[8, 8, 8],
            down_ops=[["Subsample", 8, 4, 4, 2, 2], ["Subsample", 8, 6, 4, 2, 2]],
        ),
        sizes=(IMAGE, IMAGE),  # attention biases learnt per position: one image size only
    ),
    _vision(
        "MobileViT",
        tf.MobileViTForImageClassification,
        lambda: _small_cnn(
            tf.MobileViTConfig(),
            image_size=IMAGE,
            hidden_sizes=[32, 48, 64],
            neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
        ),
    ),
    _vision(
        "PoolFormer",
        tf.PoolFormerForImageClassification,
        lambda: _small_cnn(
            tf.PoolFormerConfig(), hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1]
        ),
    ),
    _vision(
        "Dinov2",
        tf.Dinov2ForImageClassification,
        lambda: _small_cnn(tf.Dinov2Config(), image_size=IMAGE, patch_size=16),
    ),
    _vision(
        "CvT",
        tf.CvtForImageClassification,
        lambda: _small_cnn(
            # Stage i needs at least i + 1 blocks (transformers indexes its drop rates so).
            tf.CvtConfig(),
            embed_dim=[16, 32, 64],
            num_heads=[1, 2, 4],
            depth=[1, 2, 3],
        ),
    ),
    _vision(
        "SegFormer (MiT)",
        tf.SegformerForImageClassification,
        lambda: _small_cnn(
            tf.SegformerConfig(),
            hidden_sizes=[16, 32, 48, 64],
            depths=[1, 1, 1, 1],
            num_attention_heads=[1, 2, 2, 4],
            decoder_hidden_size=64,
        ),
    ),
)


def build(case: Case, seed: int = 0) -> torch.nn.Module:
    """``case``'s model with the weights of ``seed``."""
    torch.manual_seed(seed)
    return case.make()


def select(names: list[str], models: str | None) -> list[str]:
    """The models a ``--models`` option names (comma-separated), in the lists' order.

    Args:
        names: The models to choose from.
        models: The option's value; ``None`` or empty chooses every one.

    Raises:
        ValueError: A name is not among ``names``.
    """
    if not models:
        return names
    wanted = models.split(",")
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; known: {', '.join(names)}")
    return [name for name in names if name in wanted]
