"""GPT-2- and Llama-style decoders: every op converts, and the numpy runtime matches eager."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from npu_graph_export import RuntimeInputError, runtime
from npu_graph_export._proto import ge_ir_pb2 as ge

ExportDir = Callable[[str, bool], Path]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_decoder_matches_eager_through_numpy_runtime(
    decoder_exports: ExportDir,
    decoder: Callable[..., torch.nn.Module],
    make_tokens: Callable[..., torch.Tensor],
    name: str,
    dynamic: bool,
) -> None:
    model = runtime.load(decoder_exports(name, dynamic))
    eager = decoder(name)
    shapes = [(2, 8), (3, 5), (1, 11), (4, 1)] if dynamic else [(2, 8)]
    for batch, seq in shapes:
        ids = make_tokens(batch, seq, seed=batch * 100 + seq)
        with torch.no_grad():
            expected = eager(ids).numpy()
        (got,) = model.run(ids.numpy())
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_dynamic_export_writes_minus_one_for_batch_and_sequence(
    decoder_exports: ExportDir,
    name: str,
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    graph = read_graph(decoder_exports(name, True))
    (data,) = [op for op in graph.op if op.type == "Data"]
    assert list(data.output_desc[0].shape.dim) == [-1, -1]
    assert data.attr["index"].i == 0
    (net_output,) = [op for op in graph.op if op.type == "NetOutput"]
    assert list(net_output.input_desc[0].shape.dim) == [-1, -1, 64]


def test_static_export_keeps_example_shape_and_runtime_checks_it(
    decoder_exports: ExportDir,
    read_graph: Callable[[Path], ge.GraphDef],
) -> None:
    path = decoder_exports("gpt2", False)
    (data,) = [op for op in read_graph(path).op if op.type == "Data"]
    assert list(data.output_desc[0].shape.dim) == [2, 8]
    with pytest.raises(RuntimeInputError, match=r"shape \[3, 5\]"):
        runtime.load(path).run(np.zeros((3, 5), np.int64))


def test_gpt2_uses_ge_fused_operators(
    decoder_exports: ExportDir, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    graph = read_graph(decoder_exports("gpt2", False))
    by_type: dict[str, list[ge.OpDef]] = {}
    for op in graph.op:
        by_type.setdefault(op.type, []).append(op)
    layer_norm = by_type["LayerNorm"][0]
    assert [d.name for d in layer_norm.input_desc] == ["x", "gamma", "beta"]
    assert [d.name for d in layer_norm.output_desc] == ["y", "mean", "variance"]
    assert layer_norm.attr["begin_norm_axis"].i == 2
    assert layer_norm.attr["epsilon"].f == pytest.approx(1e-5)
    assert all(op.attr["approximate"].s == b"tanh" for op in by_type["GeluV2"])
    linear = [op for op in by_type["BatchMatMulV2"] if op.attr["adj_x2"].b and op.input[2]]
    assert linear
    assert [d.name for d in linear[0].input_desc] == ["x1", "x2", "bias", "offset_w"]
    assert by_type["GatherV2"]
    assert by_type["Range"]
    assert by_type["SoftmaxV2"]
    assert by_type["Tril"][0].attr["diagonal"].i == 0  # causal mask of is_causal=True
    assert len(by_type["NetOutput"]) == 1


def test_llama_uses_swish_rotary_slices_and_concat(
    decoder_exports: ExportDir, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    graph = read_graph(decoder_exports("llama", True))
    types = {op.type for op in graph.op}
    assert {"Swish", "StridedSliceV2", "ConcatV2", "Rsqrt", "ReduceMean", "SelectV2"} <= types
    assert {"Shape", "Pack"} <= types  # dynamic sizes computed in the graph
    concat = next(op for op in graph.op if op.type == "ConcatV2")
    assert concat.attr["N"].i == 2
    assert [d.name for d in concat.input_desc] == ["x0", "x1", "concat_dim"]
    softmax = next(op for op in graph.op if op.type == "SoftmaxV2")
    assert list(softmax.attr["axes"].list.i) == [3]


def test_record_nn_module_stack_names_the_layer(
    decoder_exports: ExportDir, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    graph = read_graph(decoder_exports("llama", False))
    stacks = [
        op.attr["nn_module_stack"].s.decode() for op in graph.op if "nn_module_stack" in op.attr
    ]
    assert any("layers.0" in s and "q_proj" in s for s in stacks)
    assert any("layers.1" in s for s in stacks)
    assert all(
        op.type in {"Data", "Const", "NetOutput"} or "nn_module_stack" in op.attr for op in graph.op
    )


def test_pbtxt_is_readable_node_text(
    decoder_exports: ExportDir, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    path = decoder_exports("gpt2", False)
    text = (path / "dynamo.pbtxt").read_text()
    graph = read_graph(path)
    assert text.count("node {") == len(graph.op)
    assert 'op: "LayerNorm"' in text
    assert 'op: "NetOutput"' in text
    assert 'key: "[i]x1"' in text
    assert 'key: "[o]y"' in text
    assert 'key: "begin_norm_axis"' in text
    assert "i: 2" in text
    # Constants are typed tensors (Netron shows them); weights by dtype and shape, not dumped.
    assert "tensor { dtype: DT_FLOAT" in text
    blocks = {block.split('"', 2)[1]: block for block in text.split("node {\n  name: ")[1:]}
    assert "tensor_content" not in blocks["p_wte_weight"]  # 64 x 32 floats: dtype and shape only
    assert (
        "tensor { dtype: DT_FLOAT tensor_shape { dim { size: 64 } dim { size: 32 } }"
        in (blocks["p_wte_weight"])
    )


def test_weights_are_embedded_consts_named_after_parameters(
    decoder_exports: ExportDir, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    graph = read_graph(decoder_exports("llama", False))
    weights = {
        op.attr["_weight_name"].s.decode(): op for op in graph.op if "_weight_name" in op.attr
    }
    assert "layers.0.q_proj.weight" in weights
    assert "cos_cached" in weights
    q = weights["layers.0.q_proj.weight"]
    assert q.type == "Const"
    assert q.attr["value"].t.desc.dtype == ge.DT_FLOAT
    assert list(q.attr["value"].t.desc.shape.dim) == [32, 32]
    assert len(q.attr["value"].t.data) == 32 * 32 * 4
