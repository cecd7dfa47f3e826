"""Models with convolutions export whole: HF ViT, ResNet, Whisper's encoder, a torchvision CNN.

Each model is built from a tiny config (never downloaded), exported with a fixed and with a
dynamic batch, checked against GE's op definitions, and run by the numpy runtime, which must
match eager within 1e-4 at other batch sizes too.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from npu_graph_export import dynamo_export, runtime
from npu_graph_export._proto import ge_ir_pb2 as ge
from torch import nn

Check = Callable[[ge.GraphDef], set[str]]


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: two 3x3 conv-bn, a 1x1 downsample when shapes change."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class TinyResNet(nn.Module):
    """torchvision's ResNet layout, narrowed: 7x7/2 stem, 3x3/2 max pool, two stages, a
    depthwise and a dilated conv, average pooling (plain and adaptive) and a linear head."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = BasicBlock(8, 8)
        self.layer2 = BasicBlock(8, 16, stride=2)
        self.depthwise = nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16)
        self.smooth = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        x = self.smooth(self.depthwise(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _randomize_statistics(model: nn.Module) -> nn.Module:
    """Running statistics other than 0 and 1, so batch norm is not an identity."""
    generator = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm1d | nn.BatchNorm2d):
            with torch.no_grad():
                size = module.running_mean.shape
                module.running_mean.copy_(torch.rand(size, generator=generator) - 0.5)
                module.running_var.copy_(torch.rand(size, generator=generator) + 0.5)
    return model.eval()


def _vit() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        image_size=16,
        patch_size=4,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
    )
    return transformers.ViTModel(config)


def _resnet() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1]
    )
    return transformers.ResNetModel(config)


def _whisper_encoder() -> nn.Module:
    pytest.importorskip("transformers")
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(
        vocab_size=100,
        num_mel_bins=8,
        d_model=32,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_layers=1,
        decoder_attention_heads=4,
        decoder_ffn_dim=64,
        max_source_positions=16,  # 32 input frames (two convolutions, the second of stride 2)
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    return WhisperEncoder(config)


# name -> (model factory, forward() argument name, shape of one example)
MODELS: dict[str, tuple[Callable[[], nn.Module], str, tuple[int, ...]]] = {
    "torchvision-resnet": (TinyResNet, "x", (3, 32, 32)),
    "vit": (_vit, "pixel_values", (3, 16, 16)),
    "resnet": (_resnet, "pixel_values", (3, 32, 32)),
    "whisper-encoder": (_whisper_encoder, "input_features", (8, 32)),
}
OP_TYPES = {
    "torchvision-resnet": {"Conv2D", "BNInfer", "MaxPoolV3", "AvgPoolV2"},
    "vit": {"Conv2D", "LayerNorm"},
    "resnet": {"Conv2D", "BNInfer", "MaxPoolV3"},
    "whisper-encoder": {"Conv2D", "Unsqueeze", "Squeeze", "GeluV2"},
}


def _build(name: str) -> nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # config notes about token ids in a tiny vocabulary
        return _randomize_statistics(MODELS[name][0]())


def _example(name: str, batch: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, *MODELS[name][2], generator=generator)


def _eager(model: nn.Module, name: str, x: torch.Tensor) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(**{MODELS[name][1]: x})
    if isinstance(out, torch.Tensor):
        return [out.numpy()]
    return [value.numpy() for value in out.values() if isinstance(value, torch.Tensor)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, bool], Path]:
    cache: dict[tuple[str, bool], Path] = {}

    def get(name: str, dynamic: bool) -> Path:
        if (name, dynamic) not in cache:
            path = tmp_path_factory.mktemp(f"{name}-{'dynamic' if dynamic else 'static'}")
            argument = MODELS[name][1]
            with warnings.catch_warnings():
                # transformers' output capturing sets a global while tracing, which torch.export
                # reports as a side effect (a UserWarning); the graph does not depend on it.
                warnings.simplefilter("ignore")
                dynamo_export(
                    model=_build(name),
                    export_path=path,
                    dynamic_dims={argument: [0]} if dynamic else None,
                    **{argument: _example(name, 2)},
                )
            cache[(name, dynamic)] = path
        return cache[(name, dynamic)]

    return get


@pytest.mark.parametrize("name", list(MODELS))
def test_static_export_matches_eager(
    exported: Callable[[str, bool], Path],
    name: str,
    ge_check: Check,
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    path = exported(name, False)
    assert OP_TYPES[name] <= ge_check(read_graph(path))
    x = _example(name, 2, seed=3)
    got = runtime.load(path).run(x.numpy())
    expected = _eager(_build(name), name, x)
    assert len(got) == len(expected)
    for value, reference in zip(got, expected, strict=True):
        np.testing.assert_allclose(value, reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(MODELS))
def test_dynamic_batch_export_runs_other_batch_sizes(
    exported: Callable[[str, bool], Path],
    name: str,
    ge_check: Check,
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    path = exported(name, True)
    ge_check(read_graph(path))
    model = runtime.load(path)
    assert model.inputs[0].shape[0] == -1
    for batch in (1, 3):
        x = _example(name, batch, seed=batch)
        got = model.run(x.numpy())
        for value, reference in zip(got, _eager(_build(name), name, x), strict=True):
            np.testing.assert_allclose(value, reference, rtol=1e-4, atol=1e-4)


def test_cnn_in_training_mode_asks_for_eval(tmp_path: Path) -> None:
    from npu_graph_export import UnsupportedOpError

    model = TinyResNet().train()
    with pytest.raises(UnsupportedOpError, match=r"model\.eval\(\)"):
        dynamo_export(torch.randn(2, 3, 32, 32), model=model, export_path=tmp_path / "out")
    assert not (tmp_path / "out").exists()
