"""Two small decoders in plain PyTorch (GPT-2 style and Llama style) shared by the export tests."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from npu_graph_export._proto import ge_ir_pb2 as ge
from torch import nn

VOCAB = 64


class GPT2Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp_proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(dim, dim=2)
        shape = (batch, seq, self.heads, dim // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(batch, seq, dim))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """Token + learned position embeddings, pre-LN blocks with SDPA(is_causal), tied-free head."""

    def __init__(self, dim: int = 32, heads: int = 4, layers: int = 2, max_len: int = 16) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, dim)
        self.wpe = nn.Embedding(max_len, dim)
        self.h = nn.ModuleList(GPT2Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.input_layernorm = RMSNorm(dim)
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.post_attention_layernorm = RMSNorm(dim)
        self.gate_proj = nn.Linear(dim, 2 * dim, bias=False)
        self.up_proj = nn.Linear(dim, 2 * dim, bias=False)
        self.down_proj = nn.Linear(2 * dim, dim, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        batch, seq, dim = x.shape
        head_dim = dim // self.heads
        h = self.input_layernorm(x)
        shape = (batch, seq, self.heads, head_dim)
        q = self.q_proj(h).view(shape).transpose(1, 2)
        k = self.k_proj(h).view(shape).transpose(1, 2)
        v = self.v_proj(h).view(shape).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(head_dim)
        scores = scores.masked_fill(mask, float("-inf"))
        y = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
        x = x + self.o_proj(y.transpose(1, 2).reshape(batch, seq, dim))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    """RMSNorm, rotary embeddings from cached cos/sin buffers, explicit causal mask, SwiGLU MLP."""

    def __init__(self, dim: int = 32, heads: int = 4, layers: int = 2, max_len: int = 16) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, dim)
        self.layers = nn.ModuleList(LlamaLayer(dim, heads) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, VOCAB, bias=False)
        head_dim = dim // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(max_len).float(), inv_freq)
        angles = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", angles.cos(), persistent=False)
        self.register_buffer("sin_cached", angles.sin(), persistent=False)
        causal = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        seq = idx.shape[1]
        x = self.embed_tokens(idx)
        cos, sin = self.cos_cached[:seq], self.sin_cached[:seq]
        mask = ~self.causal[:seq, :seq]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


DECODERS: dict[str, Callable[[], nn.Module]] = {"gpt2": GPT2, "llama": Llama}


def make_decoder(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return DECODERS[name]().eval()


def tokens(batch: int, seq: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, seq), generator=generator)


@pytest.fixture(scope="session")
def decoder_exports(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, bool], Path]:
    """Export each (decoder, dynamic) pair once per session; returns its export directory."""
    from npu_graph_export import ExportConfig, dynamo_export

    cache: dict[tuple[str, bool], Path] = {}

    def get(name: str, dynamic: bool) -> Path:
        key = (name, dynamic)
        if key not in cache:
            path = tmp_path_factory.mktemp(f"{name}-{'dynamic' if dynamic else 'static'}")
            dynamo_export(
                tokens(2, 8),
                model=make_decoder(name),
                export_path=path,
                dynamic=dynamic,
                config=ExportConfig(enable_record_nn_module_stack=True),
            )
            cache[key] = path
        return cache[key]

    return get


@pytest.fixture
def decoder() -> Callable[..., nn.Module]:
    return make_decoder


@pytest.fixture
def make_tokens() -> Callable[..., torch.Tensor]:
    return tokens


# -- GE IR conformance -------------------------------------------------------------------------
# The reference below is written from GE's operator definitions (the REG_OP declarations in
# CANN's op_proto headers, named per op, also carried by TorchAir's generated op builders and
# its copy of the headers, third_party/ascend/include/ops/op_proto/inc), not from this
# package's own tables, so an export is checked against what GE will read.
# Inputs: "name" required, "name?" optional, "name*" dynamic (name0, name1, ...).
# Attributes: name -> (AttrDef field, required); "list.i" is an int list.


@dataclass(frozen=True)
class GeOp:
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, tuple[str, bool]]


GE_OPS: dict[str, GeOp] = {
    "Abs": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "AdaptiveAvgPool2d": GeOp(
        ("x",), ("y",), {"output_size": ("list.i", True)}
    ),  # ops-nn pooling/adaptive_avg_pool2d/op_graph/adaptive_avg_pool2d_proto.h
    "Add": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "NetOutput": GeOp(("input*",), (), {}),  # GE framework op; inputs named input0..
    "Assign": GeOp(
        ("ref", "value"), ("ref",), {"validate_shape": ("b", False), "use_locking": ("b", False)}
    ),  # elewise_calculation_ops.h
    "AvgPoolV2": GeOp(
        ("x",),
        ("y",),
        {
            "ksize": ("list.i", True),
            "strides": ("list.i", True),
            "padding_mode": ("s", False),
            "pads": ("list.i", False),
            "data_format": ("s", False),
            "global_pooling": ("b", False),
            "ceil_mode": ("b", False),
            "exclusive": ("b", False),
            "divisor_override": ("i", False),
        },
    ),  # ops-nn pooling/avg_pool_v2/op_graph/avg_pool_v2_proto.h
    "BNInfer": GeOp(
        ("x", "scale", "offset", "mean", "variance"), ("y",), {"epsilon": ("f", True)}
    ),  # ops-nn common/inc/op_graph/op_nn_proto_extend.h
    "BatchMatMulV2": GeOp(
        ("x1", "x2", "bias?", "offset_w?"),
        ("y",),
        {"adj_x1": ("b", False), "adj_x2": ("b", False), "offset_x": ("i", False)},
    ),  # matrix_calculation_ops.h
    "BitwiseAnd": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "BitwiseOr": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "BroadcastTo": GeOp(("x", "shape"), ("y",), {}),  # pad_ops.h
    "Cast": GeOp(("x",), ("y",), {"dst_type": ("i", True)}),  # elewise_calculation_ops.h
    "ConcatV2": GeOp(("x*", "concat_dim"), ("y",), {"N": ("i", False)}),  # split_combination_ops.h
    "Const": GeOp((), ("y",), {"value": ("t", False)}),  # array_ops.h
    "Conv2D": GeOp(
        ("x", "filter", "bias?", "offset_w?"),
        ("y",),
        {
            "strides": ("list.i", True),
            "pads": ("list.i", True),
            "dilations": ("list.i", False),
            "groups": ("i", False),
            "data_format": ("s", False),
            "offset_x": ("i", False),
        },
    ),  # ops-nn common/inc/op_graph/op_nn_proto_extend.h
    "Cos": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "Cumsum": GeOp(
        ("x", "axis"), ("y",), {"exclusive": ("b", False), "reverse": ("b", False)}
    ),  # selection_ops.h
    "Data": GeOp(("x",), ("y",), {"index": ("i", False)}),  # array_ops.h
    "Equal": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "Erf": GeOp(("x",), ("y",), {}),  # math_ops.h
    "Exp": GeOp(
        ("x",), ("y",), {"base": ("f", False), "scale": ("f", False), "shift": ("f", False)}
    ),  # elewise_calculation_ops.h
    "ExpandDims": GeOp(("x", "axis"), ("y",), {}),  # array_ops.h
    "FileConstant": GeOp(
        (),
        ("y",),
        {
            "file_path": ("s", False),
            "file_id": ("s", False),
            "shape": ("list.i", True),
            "dtype": ("dt", True),
        },
    ),  # array_ops.h
    "Fill": GeOp(("dims", "value"), ("y",), {}),  # pad_ops.h
    "FloorDiv": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "Gather": GeOp(
        ("x", "indices"),
        ("y",),
        {
            "validate_indices": ("b", False),
            "batch_dims": ("i", False),
            "is_preprocessed": ("b", False),
            "negative_index_support": ("b", False),
        },
    ),  # selection_ops.h
    "GatherElements": GeOp(("x", "index"), ("y",), {"dim": ("i", False)}),  # selection_ops.h
    "GatherV2": GeOp(
        ("x", "indices", "axis"),
        ("y",),
        {
            "batch_dims": ("i", False),
            "is_preprocessed": ("b", False),
            "negative_index_support": ("b", False),
        },
    ),  # selection_ops.h
    "Gelu": GeOp(("x",), ("y",), {}),  # nonlinear_fuc_ops.h
    "GeluV2": GeOp(("x",), ("y",), {"approximate": ("s", False)}),  # nonlinear_fuc_ops.h
    "Greater": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "GreaterEqual": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "HcomAllGather": GeOp(
        ("x",),
        ("y",),
        {
            "rank_size": ("i", True),
            "group": ("s", True),
            "fusion": ("i", False),
            "fusion_id": ("i", False),
        },
    ),  # hcom_ops.h
    "HcomAllReduce": GeOp(
        ("x",),
        ("y",),
        {
            "reduction": ("s", True),
            "group": ("s", True),
            "fusion": ("i", False),
            "fusion_id": ("i", False),
        },
    ),  # hcom_ops.h
    "HcomReduceScatter": GeOp(
        ("x",),
        ("y",),
        {
            "reduction": ("s", True),
            "fusion": ("i", False),
            "fusion_id": ("i", False),
            "group": ("s", True),
            "rank_size": ("i", True),
        },
    ),  # hcom_ops.h
    "Identity": GeOp(("x",), ("y",), {}),  # array_ops.h
    "IndexByTensor": GeOp(
        ("x", "indices*"), ("y",), {"indices_mask": ("list.i", False)}
    ),  # selection.h
    "LayerNorm": GeOp(
        ("x", "gamma", "beta"),
        ("y", "mean", "variance"),
        {
            "begin_norm_axis": ("i", False),
            "begin_params_axis": ("i", False),
            "epsilon": ("f", False),
        },
    ),  # nn_norm_ops.h
    "Less": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "LessEqual": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "Log": GeOp(
        ("x",), ("y",), {"base": ("f", False), "scale": ("f", False), "shift": ("f", False)}
    ),  # elewise_calculation_ops.h
    "LogSoftmaxV2": GeOp(
        ("logits",), ("logsoftmax",), {"axes": ("list.i", False)}
    ),  # nn_norm_ops.h
    "LogicalAnd": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "LogicalNot": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "LogicalOr": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "MatMulV2": GeOp(
        ("x1", "x2", "bias?", "offset_w?"),
        ("y",),
        {"transpose_x1": ("b", False), "transpose_x2": ("b", False), "offset_x": ("i", False)},
    ),  # matrix_calculation_ops.h
    "MaxPoolV3": GeOp(
        ("x",),
        ("y",),
        {
            "ksize": ("list.i", True),
            "strides": ("list.i", True),
            "padding_mode": ("s", False),
            "pads": ("list.i", False),
            "data_format": ("s", False),
            "global_pooling": ("b", False),
            "ceil_mode": ("b", False),
        },
    ),  # ops-nn pooling/max_pool_v3/op_graph/max_pool_v3_proto.h
    "Maximum": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "Minimum": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "Mul": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "Neg": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "NotEqual": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "OnesLike": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "Pack": GeOp(
        ("x*",), ("y",), {"axis": ("i", False), "N": ("i", True)}
    ),  # split_combination_ops.h
    "Pow": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "Range": GeOp(("start", "limit", "delta"), ("y",), {}),  # selection_ops.h
    "RealDiv": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "Reciprocal": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "ReduceMax": GeOp(("x", "axes"), ("y",), {"keep_dims": ("b", False)}),  # reduce_ops.h
    "ReduceMean": GeOp(
        ("x", "axes"), ("y",), {"keep_dims": ("b", False), "noop_with_empty_axes": ("b", False)}
    ),  # reduce_ops.h
    "ReduceSum": GeOp(("x", "axes"), ("y",), {"keep_dims": ("b", False)}),  # reduce_ops.h
    "RefData": GeOp(("x",), ("y",), {"index": ("i", False)}),  # array_ops.h
    "Relu": GeOp(("x",), ("y",), {}),  # nonlinear_fuc_ops.h
    "Reshape": GeOp(
        ("x", "shape"), ("y",), {"axis": ("i", False), "num_axes": ("i", False)}
    ),  # array_ops.h
    "Rsqrt": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "SelectV2": GeOp(("condition", "then", "else"), ("result",), {}),  # selection_ops.h
    "Shape": GeOp(("x",), ("y",), {"dtype": ("i", False)}),  # array_ops.h
    "Sigmoid": GeOp(("x",), ("y",), {}),  # nonlinear_fuc_ops.h
    "Sin": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "SoftmaxV2": GeOp(
        ("x",), ("y",), {"axes": ("list.i", False), "half_to_float": ("b", False)}
    ),  # nn_norm_ops.h
    "SplitV": GeOp(
        ("x", "size_splits", "split_dim"), ("y*",), {"num_split": ("i", True)}
    ),  # split_combination_ops.h
    "Sqrt": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "Squeeze": GeOp(("x",), ("y",), {"axis": ("list.i", False)}),  # array_ops.h
    "StridedSliceV2": GeOp(
        ("x", "begin", "end", "axes?", "strides?"),
        ("y",),
        {
            "begin_mask": ("i", False),
            "end_mask": ("i", False),
            "ellipsis_mask": ("i", False),
            "new_axis_mask": ("i", False),
            "shrink_axis_mask": ("i", False),
        },
    ),  # selection_ops.h
    "Sub": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "Swish": GeOp(("x",), ("y",), {"scale": ("f", False)}),  # nonlinear_fuc_ops.h
    "TensorScatterUpdate": GeOp(
        ("x", "indices", "updates"), ("y",), {}
    ),  # matrix_calculation_ops.h
    "Tanh": GeOp(("x",), ("y",), {}),  # nonlinear_fuc_ops.h
    "Transpose": GeOp(("x", "perm"), ("y",), {}),  # transformation_ops.h
    "Tril": GeOp(("x",), ("y",), {"diagonal": ("i", False)}),  # matrix_calculation_ops.h
    "Triu": GeOp(("x",), ("y",), {"diagonal": ("i", False)}),  # matrix_calculation_ops.h
    "Unsqueeze": GeOp(("x",), ("y",), {"axes": ("list.i", False)}),  # array_ops.h
    "ZerosLike": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "FloorMod": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "Mod": GeOp(("x1", "x2"), ("y",), {}),  # elewise_calculation_ops.h
    "Floor": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "Ceil": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "Sign": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "Log1p": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "Expm1": GeOp(("x",), ("y",), {}),  # elewise_calculation_ops.h
    "LeakyRelu": GeOp(("x",), ("y",), {"negative_slope": ("f", False)}),  # nonlinear_fuc_ops.h
    "Elu": GeOp(
        ("x",),
        ("y",),
        {"alpha": ("f", False), "scale": ("f", False), "input_scale": ("f", False)},
    ),  # nonlinear_fuc_ops.h
    "ReduceMin": GeOp(("x", "axes"), ("y",), {"keep_dims": ("b", False)}),  # reduce_ops.h
    "ReduceProd": GeOp(("x", "axes"), ("y",), {"keep_dims": ("b", False)}),  # reduce_ops.h
    "ReduceAll": GeOp(("x", "axes"), ("y",), {"keep_dims": ("b", False)}),  # reduce_ops.h
    "ReduceAny": GeOp(("x", "axes"), ("y",), {"keep_dims": ("b", False)}),  # reduce_ops.h
    "LpNormV2": GeOp(
        ("x",),
        ("y",),
        {
            "p": ("f", False),
            "axes": ("list.i", False),
            "keepdim": ("b", False),
            "epsilon": ("f", False),
        },
    ),  # math_ops.h
    "GroupNorm": GeOp(
        ("x", "gamma", "beta"),
        ("y", "mean", "variance"),
        {
            "num_groups": ("i", True),
            "data_format": ("s", False),
            "eps": ("f", False),
            "is_training": ("b", False),
        },
    ),  # nn_norm_ops.h
    "ArgMaxV2": GeOp(
        ("x", "dimension"), ("y",), {"dtype": ("dt", False)}
    ),  # elewise_calculation_ops.h
    "ArgMin": GeOp(
        ("x", "dimension"), ("y",), {"dtype": ("dt", False)}
    ),  # elewise_calculation_ops.h
    "ArgMaxWithValue": GeOp(
        ("x",), ("indice", "values"), {"dimension": ("i", True), "keep_dims": ("b", False)}
    ),  # elewise_calculation_ops.h
    "ArgMinWithValue": GeOp(
        ("x",), ("indice", "values"), {"dimension": ("i", True), "keep_dims": ("b", False)}
    ),  # elewise_calculation_ops.h
    "TopKV2": GeOp(
        ("x", "k"),
        ("values", "indices"),
        {"sorted": ("b", False), "dim": ("i", False), "largest": ("b", False)},
    ),  # selection_ops.h
    "Sort": GeOp(
        ("x",),
        ("y1", "y2"),
        {"axis": ("i", False), "descending": ("b", False), "stable": ("b", False)},
    ),  # nn_detect_ops.h
    "Histogram": GeOp(
        ("x",), ("y",), {"bins": ("i", False), "min": ("f", False), "max": ("f", False)}
    ),  # math_ops.h
    "PadV3": GeOp(
        ("x", "paddings", "constant_values?"),
        ("y",),
        {"mode": ("s", False), "paddings_contiguous": ("b", False)},
    ),  # pad_ops.h
    "Tile": GeOp(("x", "multiples"), ("y",), {}),  # selection_ops.h
    "TensorScatterAdd": GeOp(("x", "indices", "updates"), ("y",), {}),  # matrix_calculation_ops.h
    "ScatterElements": GeOp(
        ("data", "indices", "updates"), ("y",), {"axis": ("i", False), "reduction": ("s", False)}
    ),  # matrix_calculation_ops.h
    "AsStrided": GeOp(
        ("x", "size", "stride", "storage_offset"), ("y",), {}
    ),  # transformation_ops.h
    "ReverseV2": GeOp(("x", "axis"), ("y",), {}),  # selection_ops.h
    "FFT": GeOp(("x",), ("y",), {}),  # spectral_ops.h
    "IFFT": GeOp(("x",), ("y",), {}),  # spectral_ops.h
    "FFT2D": GeOp(("x",), ("y",), {}),  # spectral_ops.h
    "IFFT2D": GeOp(("x",), ("y",), {}),  # spectral_ops.h
    "Real": GeOp(("input",), ("output",), {"Tout": ("dt", False)}),  # math_ops.h
    "Imag": GeOp(("input",), ("output",), {"Tout": ("dt", False)}),  # math_ops.h
    "Complex": GeOp(("real", "imag"), ("out",), {"Tout": ("dt", False)}),  # math_ops.h
    "GroupedMatmul": GeOp(
        (
            "x*",
            "weight*",
            "bias*",
            "scale*",
            "offset*",
            "antiquant_scale*",
            "antiquant_offset*",
            "group_list?",
            "per_token_scale?",
        ),
        ("y*",),
        {
            "split_item": ("i", False),
            "dtype": ("i", False),
            "transpose_weight": ("b", False),
            "transpose_x": ("b", False),
            "group_type": ("i", False),
            "group_list_type": ("i", False),
            "act_type": ("i", False),
            "tuning_config": ("list.i", False),
        },
    ),  # experiment_ops.h; group_list_type, act_type, per_token_scale: TorchAir's builder
}

NCHW_DESCRIPTORS: dict[str, set[str]] = {
    "Conv2D": {"x", "filter", "y"},
    "MaxPoolV3": {"x", "y"},
    "AvgPoolV2": {"x", "y"},
    "BNInfer": {"x", "scale", "offset", "mean", "variance", "y"},
    "GroupNorm": {"x", "gamma", "beta", "y", "mean", "variance"},
}
"""Descriptors TorchAir's converters mark NCHW (``specific_op_input_layout``); all others ND.
Conv2D's bias stays ND, as GE's definition of Conv2D lists it."""

GE_FORMAT = {"NCHW": 0, "ND": 2}
"""``ge::Format`` numbers (metadef graph/types.h) that ``format_for_int`` holds per layout."""

GE_C_DATATYPE = {
    "DT_FLOAT": 0,
    "DT_FLOAT16": 1,
    "DT_INT8": 2,
    "DT_INT32": 3,
    "DT_UINT8": 4,
    "DT_INT16": 6,
    "DT_UINT16": 7,
    "DT_UINT32": 8,
    "DT_INT64": 9,
    "DT_UINT64": 10,
    "DT_DOUBLE": 11,
    "DT_BOOL": 12,
    "DT_COMPLEX64": 16,
    "DT_COMPLEX128": 17,
    "DT_BF16": 27,
    "DT_FLOAT8_E5M2": 35,
    "DT_FLOAT8_E4M3FN": 36,
}
"""ge::DataType (the C enum GE casts dtype-valued attributes to), by enum name."""

# Attributes GE ignores or that tools read; GE skips names starting with "_".
_EXTRA_ATTRS = {"nn_module_stack"}
_NAME_MAPS = ("_input_name_key", "_input_name_value", "_output_name_key", "_output_name_value")


def _expand_names(names: tuple[str, ...], actual: list[str]) -> list[str]:
    """The descriptor names GE's definition allows for ``actual``, in order.

    A dynamic input (``x*``) takes as many consecutive ``x0``, ``x1``, ... as ``actual`` holds
    at that point (any number, none included); an optional input (``name?``) may be left out
    once nothing follows it.
    """
    out: list[str] = []
    position = 0
    for name in names:
        if name.endswith("*"):
            stem, index = name[:-1], 0
            while position < len(actual) and actual[position] == f"{stem}{index}":
                out.append(actual[position])
                position += 1
                index += 1
        elif position < len(actual) or not name.endswith("?"):
            out.append(name.rstrip("?"))
            position += 1
    return out


def _attr_kind(value: ge.AttrDef) -> str:
    field = value.WhichOneof("value")
    if field == "list":
        if value.list.val_type == ge.AttrDef.ListValue.VT_LIST_STRING or value.list.s:
            return "list.s"
        if value.list.val_type == ge.AttrDef.ListValue.VT_LIST_FLOAT or value.list.f:
            return "list.f"
        return "list.i"
    return str(field)


def _c_of_proto(proto: int) -> int:
    return GE_C_DATATYPE[ge.DataType.Name(proto)]


def _check_layout(desc: ge.TensorDescriptor, op_type: str, where: str) -> None:
    # GE takes the format from format_for_int before the layout string: both must say the same.
    want = "NCHW" if desc.name in NCHW_DESCRIPTORS.get(op_type, set()) else "ND"
    assert desc.layout == want, f"{where}: {desc.name} layout {desc.layout}, not {want}"
    assert "format_for_int" in desc.attr, f"{where}: {desc.name} has no format_for_int"
    assert desc.attr["format_for_int"].i == GE_FORMAT[want], f"{where}: {desc.name} format"


def check_ge_graph(graph: ge.GraphDef) -> set[str]:
    """Assert every op of ``graph`` is as GE's op definitions declare it; return the op types."""
    ops = {op.name: op for op in graph.op}
    for op in graph.op:
        where = f"{op.type} {op.name!r}"
        assert op.type in GE_OPS, f"{where}: not in the GE op table"
        spec = GE_OPS[op.type]
        data_inputs = [ref for ref in op.input if not ref.endswith(":-1")]
        if op.type in {"Data", "RefData"}:
            # Graph inputs: no input edge, but an input descriptor "x" equal to the output's.
            assert not data_inputs, where
            assert [d.name for d in op.input_desc] == ["x"], where
            assert op.input_desc[0].dtype == op.output_desc[0].dtype, where
            data_inputs = [f"{op.name}:0"]
        assert len(data_inputs) == len(op.input_desc), where
        want = _expand_names(spec.inputs, [d.name for d in op.input_desc])
        assert [d.name for d in op.input_desc] == want, where
        for name, ref, desc in zip(want, data_inputs, op.input_desc, strict=True):
            optional = f"{name}?" in spec.inputs
            if not ref:
                assert optional, f"{where}: required input {name} unfed"
                assert desc.attr["_is_unfed_optional"].i == 1, where
                assert desc.dtype == ge.DT_UNDEFINED, where
            else:
                producer, index = ref.rsplit(":", 1)
                assert producer in ops, where
                assert int(index) >= 0, where
                source = ops[producer].output_desc
                assert op.type in {"Data", "RefData"} or source[int(index)].dtype == desc.dtype, (
                    f"{where}: input {name} dtype differs from its producer's output"
                )
                assert "_is_unfed_optional" not in desc.attr, where
                _check_layout(desc, op.type, where)
                assert desc.dtype != ge.DT_UNDEFINED, where
        assert [d.name for d in op.output_desc] == _expand_names(
            spec.outputs, [d.name for d in op.output_desc]
        ), where
        if not any(n.endswith("*") for n in spec.outputs):
            assert len(op.output_desc) == len(spec.outputs), where
        for desc in op.output_desc:
            _check_layout(desc, op.type, where)
        for name, value in op.attr.items():
            if name.startswith("_") or name in _EXTRA_ATTRS:
                continue
            assert name in spec.attrs, f"{where}: attribute {name!r} is not in GE's IR"
            assert _attr_kind(value) == spec.attrs[name][0], f"{where}: {name} type"
        for name, (_, required) in spec.attrs.items():
            assert not required or name in op.attr, f"{where}: lacks required {name}"
        # GE's loader maps input/output names to indices from these four lists only.
        assert all(key in op.attr for key in _NAME_MAPS), where
        assert list(op.attr["_input_name_key"].list.s) == [
            d.name.encode() for d in op.input_desc
        ], where
        assert list(op.attr["_input_name_value"].list.i) == list(range(len(op.input_desc)))
        assert list(op.attr["_output_name_key"].list.s) == [
            d.name.encode() for d in op.output_desc
        ], where
        assert list(op.attr["_output_name_value"].list.i) == list(range(len(op.output_desc)))
        # Dtype-valued attributes hold ge::DataType values, matching the output descriptor.
        if op.type == "Cast":
            assert op.attr["dst_type"].i == _c_of_proto(op.output_desc[0].dtype), where
        if op.type == "FileConstant":
            assert op.attr["dtype"].dt == _c_of_proto(op.output_desc[0].dtype), where
        if op.type == "Shape":
            assert op.attr["dtype"].i == _c_of_proto(op.output_desc[0].dtype), where
        if op.type == "SplitV":
            producer = ops[op.input[2].rsplit(":", 1)[0]]
            assert op.input_desc[2].dtype == ge.DT_INT32, where
            assert producer.type != "Const" or producer.attr["value"].t.desc.dtype == ge.DT_INT32
        if op.type in {"Gather", "GatherV2"}:
            producer = ops[op.input[0].rsplit(":", 1)[0]]
            if producer.type == "Shape":
                assert op.attr["_force_unknown_shape"].b, f"{where}: reads a size"
        if op.type in {"Data", "RefData"}:
            assert op.attr["index"].WhichOneof("value") == "i", where
    return {op.type for op in graph.op}


def read_ge_graph(path: Path) -> ge.GraphDef:
    """The graph of an ``.air`` file, or of the ``export.air`` in an export directory."""
    model = ge.ModelDef()
    model.ParseFromString((path / "export.air" if path.is_dir() else path).read_bytes())
    return model.graph[0]


@pytest.fixture
def read_graph() -> Callable[[Path], ge.GraphDef]:
    """Read back an exported graph (see ``read_ge_graph``)."""
    return read_ge_graph


@pytest.fixture
def ge_check() -> Callable[[ge.GraphDef], set[str]]:
    """The GE conformance check of a graph (see ``check_ge_graph``)."""
    return check_ge_graph


@pytest.fixture
def ge_op_table() -> dict[str, GeOp]:
    """GE's operator definitions for every op type the exporter may write."""
    return GE_OPS


ExportCheck = Callable[..., ge.GraphDef]


@pytest.fixture
def export_check(tmp_path: Path) -> ExportCheck:
    """Export ``model(*inputs)``, check it against GE's definitions and run it against eager.

    Returns the exported graph. ``dynamic`` exports with dynamic shapes; ``others`` are more
    input tuples the graph then runs on (other sizes, for a dynamic export); every output must
    have eager's dtype and shape and equal its values within ``rtol``/``atol``.
    """
    from npu_graph_export import dynamo_export, runtime

    count = 0

    def check(
        model: nn.Module,
        *inputs: torch.Tensor,
        dynamic: bool = False,
        others: tuple[tuple[torch.Tensor, ...], ...] = (),
        rtol: float = 1e-5,
        atol: float = 1e-6,
    ) -> ge.GraphDef:
        nonlocal count
        count += 1
        path = tmp_path / f"export{count}"
        model = model.eval()
        dynamo_export(*inputs, model=model, export_path=path, dynamic=dynamic)
        graph = read_ge_graph(path)
        check_ge_graph(graph)
        loaded = runtime.load(path)
        for args in (inputs, *others):
            with torch.no_grad():
                expected = model(*args)
            expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
            got = loaded.run(*(a.numpy() for a in args))
            assert len(got) == len(expected)
            for index, (g, e) in enumerate(zip(got, expected, strict=True)):
                want = e.numpy()
                assert g.dtype == want.dtype, f"output {index}: {g.dtype} != {want.dtype}"
                assert g.shape == want.shape, f"output {index}: {g.shape} != {want.shape}"
                np.testing.assert_allclose(g, want, rtol=rtol, atol=atol, err_msg=f"output {index}")
        return graph

    return check
