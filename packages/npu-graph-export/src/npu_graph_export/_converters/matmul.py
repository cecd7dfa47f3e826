"""Matrix products: linear layers, mm/bmm/matmul and addmm."""

from __future__ import annotations

from torch import fx

from npu_graph_export._converters._base import Context, Value, args_of, aten, kwargs_of, register
from npu_graph_export._graph import Tensor


def _matmul(
    ctx: Context, x1: Tensor, x2: Tensor, *, transpose_x2: bool = False, bias: Tensor | None = None
) -> Tensor:
    inputs = [x1, x2] if bias is None else [x1, x2, bias]
    if len(x1.shape) == 2 and len(x2.shape) == 2:
        return ctx.emit(
            "MatMulV2", inputs, {"transpose_x1": False, "transpose_x2": transpose_x2, "offset_x": 0}
        )
    # BatchMatMulV2 broadcasts batch dimensions, so a 2-D weight serves any [..., K] input.
    return ctx.emit(
        "BatchMatMulV2", inputs, {"adj_x1": False, "adj_x2": transpose_x2, "offset_x": 0}
    )


@register(aten.linear.default)
def _linear(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    x = ctx.tensor(args_of(node)[0], dtype)
    weight = ctx.tensor(args_of(node)[1], dtype)
    bias_arg = args_of(node)[2] if len(args_of(node)) > 2 else kwargs_of(node).get("bias")
    bias = None if bias_arg is None else ctx.tensor(bias_arg, dtype)
    return _matmul(ctx, x, weight, transpose_x2=True, bias=bias)


@register(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _mm(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    x1, x2 = (ctx.tensor(a, dtype) for a in args_of(node)[:2])
    if len(x1.shape) == 1 or len(x2.shape) == 1:
        from npu_graph_export.errors import UnsupportedOpError

        raise UnsupportedOpError(
            "matmul with a 1-D operand has no GE converter here; unsqueeze the vector to 2-D"
        )
    return _matmul(ctx, x1, x2)


@register(aten.addmm.default)
def _addmm(ctx: Context, node: fx.Node) -> Value:
    dtype = ctx.out_dtype()
    bias, x1, x2 = (ctx.tensor(a, dtype) for a in args_of(node)[:3])
    beta = kwargs_of(node).get("beta", 1)
    alpha = kwargs_of(node).get("alpha", 1)
    if beta != 1 or alpha != 1:
        from npu_graph_export.errors import UnsupportedOpError

        raise UnsupportedOpError("aten.addmm with alpha/beta other than 1 has no GE converter")
    product = _matmul(ctx, x1, x2)
    # MatMulV2's bias must be 1-D; a general addmm input is added afterwards.
    return ctx.emit("Add", [product, bias], suffix="bias")
