"""``F.scaled_dot_product_attention`` as GE matmuls, a mask and a softmax."""

from __future__ import annotations

import math

from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, kwargs_of, register
from npu_graph_export._converters.activation import zero_masked_rows
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import UnsupportedOpError


@register(aten.scaled_dot_product_attention.default)
def _sdpa(ctx: Context, node: fx.Node) -> Value:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    params = dict(zip(names, args_of(node), strict=False))
    params.update(kwargs_of(node))
    if float(params.get("dropout_p") or 0.0) != 0.0:
        raise UnsupportedOpError(
            "scaled_dot_product_attention with dropout_p > 0 cannot be exported for inference; "
            "pass dropout_p=0.0 (or self.training and p) and export the model in eval mode"
        )
    if params.get("enable_gqa"):
        raise UnsupportedOpError(
            "scaled_dot_product_attention(enable_gqa=True) has no GE converter here; repeat the "
            "key/value heads (repeat_interleave) before the call"
        )
    dtype = ctx.out_dtype()
    q, k, v = (ctx.tensor(params[n], dtype) for n in ("query", "key", "value"))
    scale = params.get("scale")
    if scale is None and q.shape[-1] < 0:
        raise UnsupportedOpError(
            "scaled_dot_product_attention with a dynamic head size needs an explicit scale="
        )
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores_shape = (*q.shape[:-1], k.shape[-2])
    attrs = {"adj_x1": False, "adj_x2": True, "offset_x": 0}
    scores = ctx.emit("BatchMatMulV2", [q, k], attrs, shape=scores_shape, suffix="scores")
    scores = ctx.emit(
        "Mul", [scores, ctx.tensor(factor, dtype)], shape=scores_shape, suffix="scale"
    )
    minus_inf = ctx.tensor(-math.inf, dtype)
    if params.get("is_causal"):
        # Lower-triangular ones over the last two dims, as a bool mask; works for dynamic L/S.
        ones = ctx.emit("OnesLike", [scores], shape=scores_shape, suffix="ones")
        tril = ctx.emit("Tril", [ones], {"diagonal": 0}, shape=scores_shape, suffix="tril")
        keep = ctx.cast(tril, ge.DT_BOOL)
        scores = ctx.emit(
            "SelectV2", [keep, scores, minus_inf], shape=scores_shape, suffix="causal"
        )
    mask_arg = params.get("attn_mask")
    if mask_arg is not None:
        mask = ctx.tensor(mask_arg)
        if mask.dtype == ge.DT_BOOL:
            scores = ctx.emit(
                "SelectV2", [mask, scores, minus_inf], shape=scores_shape, suffix="mask"
            )
        else:
            scores = ctx.emit(
                "Add", [scores, ctx.cast(mask, dtype)], shape=scores_shape, suffix="mask"
            )
    axis = -1 % len(scores_shape)
    probs = ctx.emit("SoftmaxV2", [scores], {"axes": [axis]}, shape=scores_shape, suffix="softmax")
    if mask_arg is not None:
        # Eager SDPA gives 0, not NaN, for a query whose every key is masked out.
        probs = zero_masked_rows(ctx, scores, probs, axis)
    return ctx.emit("BatchMatMulV2", [probs, v], {"adj_x1": False, "adj_x2": False, "offset_x": 0})
