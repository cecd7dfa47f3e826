"""The rule table of the padding proof: how each ATen op maps the batch from inputs to outputs.

The rules live in :mod:`npu_compile._padding.views` (elementwise ops, views, joins) and
:mod:`npu_compile._padding.ops` (products, lookups, reductions, norms, attention). An op missing
here fails the proof (the graph is then captured per size, never padded): the table lists what
is known to be safe, not what is known to be unsafe. Ops tagged ``torch.Tag.pointwise`` are
elementwise without being listed.
"""

from __future__ import annotations

import torch

from npu_compile._padding import ops, views
from npu_compile._padding.proof import Rule, schema_arg
from npu_compile._padding.views import aten_ops

__all__ = ["rule_for"]


_ALONG: dict[str, tuple[str, object, bool]] = {
    # op: (argument naming the dimensions, its default, whether [] means every dimension)
    "sum.dim_IntList": ("dim", None, True),
    "mean.dim": ("dim", None, True),
    "amax.default": ("dim", None, True),
    "amin.default": ("dim", None, True),
    "max.dim": ("dim", None, False),
    "min.dim": ("dim", None, False),
    "argmax.default": ("dim", None, False),
    "argmin.default": ("dim", None, False),
    "prod.dim_int": ("dim", None, False),
    "var.correction": ("dim", None, True),
    "std.correction": ("dim", None, True),
    "var_mean.correction": ("dim", None, True),
    "std_mean.correction": ("dim", None, True),
    "logsumexp.default": ("dim", None, True),
    "any.dim": ("dim", None, False),
    "any.dims": ("dim", None, True),
    "all.dim": ("dim", None, False),
    "all.dims": ("dim", None, True),
    "linalg_vector_norm.default": ("dim", None, True),
    "cumsum.default": ("dim", None, False),
    "cumprod.default": ("dim", None, False),
    "logcumsumexp.default": ("dim", None, False),
    "cummax.default": ("dim", None, False),
    "cummin.default": ("dim", None, False),
    "_softmax.default": ("dim", None, False),
    "_log_softmax.default": ("dim", None, False),
    "softmax.int": ("dim", None, False),
    "log_softmax.int": ("dim", None, False),
    "sort.default": ("dim", -1, False),
    "sort.stable": ("dim", -1, False),
    "topk.default": ("dim", -1, False),
    "kthvalue.default": ("dim", -1, False),
    "flip.default": ("dims", None, False),
    "roll.default": ("dims", None, True),
}

_RULES: dict[object, Rule] = {}


def _add(rule: Rule, *names: str) -> None:
    for op in aten_ops(*names):
        _RULES[op] = rule


_add(
    views.copy_like,
    "_to_copy.default",
    "clone.default",
    "copy.default",
    "alias.default",
    "detach.default",
    "lift_fresh_copy.default",
)
_RULES[torch.ops.prims.convert_element_type.default] = views.copy_like
_add(
    views.pointwise,
    "where.self",
    "where.ScalarSelf",
    "where.ScalarOther",
    "where.Scalar",
    "masked_fill.Scalar",
    "masked_fill.Tensor",
    "fill.Scalar",
    "fill.Tensor",
)
_add(
    views.reshape,
    "view.default",
    "view_copy.default",
    "_unsafe_view.default",
    "reshape.default",
    "unsqueeze.default",
    "unsqueeze_copy.default",
    "squeeze.default",
    "squeeze.dim",
    "squeeze.dims",
    "squeeze_copy.dim",
    "flatten.using_ints",
    "unflatten.int",
)
_add(views.permute, "permute.default", "permute_copy.default", "transpose.int", "t.default")
_add(views.permute, "transpose_copy.int", "t_copy.default")
_add(views.expand, "expand.default", "expand_copy.default")
_add(views.slice_, "slice.Tensor", "slice_copy.Tensor")
_add(views.along_other("dim"), "select.int", "select_copy.int", "unbind.int")
_add(views.along_other("dim"), "split.Tensor", "split_with_sizes.default", "chunk.default")
_add(views.cat, "cat.default")
_add(views.stack, "stack.default")
_add(ops.matmul, "mm.default", "addmm.default", "bmm.default", "baddbmm.default")
_add(ops.linear, "linear.default")
_add(ops.embedding, "embedding.default")
_add(ops.index, "index.Tensor", "_unsafe_index.Tensor")
_add(ops.index_select, "index_select.default")
_add(ops.gather, "gather.default")
for _name, (_argument, _default, _empty) in _ALONG.items():
    _add(ops.along(_argument, _default, _empty), _name)
_add(
    ops.normalize(lambda node: len(schema_arg(node, "normalized_shape"))),
    "native_layer_norm.default",
    "layer_norm.default",
    "_fused_rms_norm.default",
    "rms_norm.default",
)
_add(
    ops.batch_norm,
    "_native_batch_norm_legit_no_training.default",
    "_native_batch_norm_legit_functional.default",
    "_native_batch_norm_legit.no_stats",
    "native_batch_norm.default",
)
_add(ops.group_norm, "native_group_norm.default")
_add(
    ops.leading("query", "key", "value", "attn_mask", "attn_bias"),
    "scaled_dot_product_attention.default",
    "_scaled_dot_product_attention_math.default",
    "_scaled_dot_product_flash_attention_for_cpu.default",
    "_scaled_dot_product_flash_attention.default",
    "_scaled_dot_product_efficient_attention.default",
    "_scaled_dot_product_cudnn_attention.default",
    "_scaled_dot_product_fused_attention_overrideable.default",
)
_add(ops.leading("input"), "convolution.default")
_add(
    ops.leading("self", "input"),
    "max_pool2d_with_indices.default",
    "max_pool3d_with_indices.default",
    "avg_pool2d.default",
    "avg_pool3d.default",
    "_adaptive_avg_pool2d.default",
    "_adaptive_avg_pool3d.default",
    "adaptive_max_pool2d.default",
    "upsample_nearest2d.vec",
    "upsample_bilinear2d.vec",
)
_add(ops.last_dims(lambda node: 2), "tril.default", "triu.default")
_add(ops.last_dims(lambda node: len(schema_arg(node, "pad")) // 2), "constant_pad_nd.default")
_add(
    ops.factory,
    "full.default",
    "zeros.default",
    "ones.default",
    "empty.memory_format",
    "empty_strided.default",
    "new_zeros.default",
    "new_ones.default",
    "new_full.default",
    "new_empty.default",
    "new_empty_strided.default",
    "zeros_like.default",
    "ones_like.default",
    "full_like.default",
    "empty_like.default",
    "scalar_tensor.default",
)
_add(ops.arange, "arange.default", "arange.start", "arange.start_step")


def rule_for(target: torch._ops.OpOverload) -> Rule | None:
    """The rule of an ATen op: from the table, or elementwise for ops tagged pointwise."""
    rule = _RULES.get(target)
    if rule is None and torch.Tag.pointwise in target.tags:
        rule = views.pointwise
    return rule
