"""Mixture-of-experts products (``aten._grouped_mm``, its transformers fallback) in one GE op.

Both take the routed tokens sorted by expert (``x``: rows x K), every expert's weight
(``weight``: experts x K x N) and the cumulative row count per expert (``offs``): rows
``offs[i-1]:offs[i]`` are multiplied by expert ``i``. GE's ``GroupedMatmul`` computes exactly this
with a single ``x``, ``weight`` and ``y`` (``split_item=3``), groups along the rows
(``group_type=0``) and a cumulative ``group_list`` (int64: ``group_list_type`` 0, its default,
left unwritten as in GE's older definition, which lacks the attribute).
transformers registers ``transformers::grouped_mm_fallback`` (used on CPU and for non-bf16
weights); its converter is found by name, since this package never imports transformers.
"""

from __future__ import annotations

from torch import fx

from npu_graph_export._converters._base import (
    Context,
    Value,
    args_of,
    aten,
    kwargs_of,
    register,
    register_named,
)
from npu_graph_export._graph import DType
from npu_graph_export._proto import ge_ir_pb2 as ge
from npu_graph_export.errors import UnsupportedOpError


@register(aten._grouped_mm.default)
@register_named("transformers.grouped_mm_fallback.default")
def _grouped_mm(ctx: Context, node: fx.Node) -> Value:
    args, kwargs = list(args_of(node)), kwargs_of(node)
    x_arg, weight_arg = args[:2]
    offs = args[2] if len(args) > 2 else kwargs.get("offs")
    bias = args[3] if len(args) > 3 else kwargs.get("bias")
    dtype = ctx.out_dtype()
    x = ctx.tensor(x_arg, dtype)
    weight = ctx.tensor(weight_arg, dtype)
    if offs is None or bias is not None or len(x.shape) != 2 or len(weight.shape) != 3:
        raise UnsupportedOpError(
            "grouped_mm converts as rows (S, K) times experts (E, K, N) with offs and no bias "
            "(a mixture-of-experts layer); other forms have no GE converter here"
        )
    offsets = ctx.tensor(offs)
    group_list = ctx.emit(
        "Cast",
        [offsets],
        {"dst_type": DType(ge.DT_INT64, as_int=True)},
        dtype=ge.DT_INT64,
        shape=offsets.shape,
        suffix="group_list",
    )
    return ctx.builder.add(
        "GroupedMatmul",
        ctx.name(),
        [x, weight, group_list],
        [(dtype, ctx.out_shape())],
        {
            "split_item": 3,
            "transpose_weight": False,
            "transpose_x": False,
            "group_type": 0,
        },
        dynamic={"x": 1, "weight": 1},
    )[0]
