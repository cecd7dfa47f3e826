"""A decode step that updates a static KV cache in place exports as GE RefData + Assign."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from npu_graph_export import ExportError, RuntimeInputError, dynamo_export, runtime
from npu_graph_export._proto import ge_ir_pb2 as ge

Check = Callable[[ge.GraphDef], set[str]]


class DecodeStep(torch.nn.Module):
    """Writes this step's key at ``pos`` of the cache, then attends over the cache so far."""

    def __init__(self) -> None:
        super().__init__()
        self.k = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, cache: torch.Tensor, pos: int) -> torch.Tensor:
        cache[:, pos : pos + 1] = self.k(x)
        return cache[:, : pos + 1].sum(1)


class SelectStep(torch.nn.Module):
    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache[:, 2] = x * 3
        return cache.mean(1)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_slice_update_of_a_cache_is_ref_data_and_assign(
    tmp_path: Path, ge_check: Check, dynamic: bool, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    torch.manual_seed(0)
    model = DecodeStep().eval()
    x = torch.randn(2, 1, 4)
    dynamo_export(x, torch.zeros(2, 8, 4), 3, model=model, export_path=tmp_path, dynamic=dynamic)
    graph = read_graph(tmp_path)
    assert {"RefData", "Assign"} <= ge_check(graph)
    (ref,) = [op for op in graph.op if op.type == "RefData"]
    (assign,) = [op for op in graph.op if op.type == "Assign"]
    assert assign.input[0] == f"{ref.name}:0"
    (net,) = [op for op in graph.op if op.type == "NetOutput"]
    assert f"{assign.name}:-1" in net.input
    # Every other reader of the cache runs before the Assign overwrites it.
    readers = {op.name for op in graph.op if f"{ref.name}:0" in op.input} - {assign.name}
    assert readers <= {ref.split(":")[0] for ref in assign.input if ref.endswith(":-1")}

    loaded = runtime.load(tmp_path)
    pos = 5 if dynamic else 3
    cache = np.random.default_rng(0).standard_normal((2, 8, 4)).astype(np.float32)
    expected_cache = torch.from_numpy(cache.copy())
    with torch.no_grad():
        expected = model(x, expected_cache, pos).numpy()
    (got,) = loaded.run(x.numpy(), cache, *((pos,) if dynamic else ()))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cache, expected_cache.numpy(), rtol=1e-6)  # updated in place


def test_index_assignment_of_a_cache_row(
    tmp_path: Path, ge_check: Check, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    x = torch.randn(2, 4)
    dynamo_export(x, torch.zeros(2, 5, 4), model=SelectStep(), export_path=tmp_path)
    ge_check(read_graph(tmp_path))
    cache = np.ones((2, 5, 4), np.float32)
    expected_cache = torch.ones(2, 5, 4)
    expected = SelectStep()(x, expected_cache)
    (got,) = runtime.load(tmp_path).run(x.numpy(), cache)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(cache, expected_cache.numpy())


def test_runtime_needs_the_callers_writable_cache(tmp_path: Path) -> None:
    dynamo_export(torch.randn(2, 4), torch.zeros(2, 5, 4), model=SelectStep(), export_path=tmp_path)
    loaded = runtime.load(tmp_path)
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(RuntimeInputError, match="in place"):
        loaded.run(x, np.zeros((2, 5, 4), np.float64))  # would be a converted copy
    frozen = np.zeros((2, 5, 4), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(RuntimeInputError, match="writable"):
        loaded.run(x, frozen)


class Aliased(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        return a + b


def test_views_of_one_tensor_written_in_place_are_refused(tmp_path: Path) -> None:
    cache = torch.zeros(3, 2)
    for other in (cache[0], cache[1:], cache.t()):  # another shape, offset, strides
        with pytest.raises(ExportError, match=r"'a' and 'b' are different views of one tensor"):
            dynamo_export(cache, other, model=Aliased(), export_path=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_tensor_passed_twice_and_written_is_one_ref_data(
    tmp_path: Path, ge_check: Check, read_graph: Callable[[Path], ge.GraphDef]
) -> None:
    cache = torch.zeros(2, 3)
    dynamo_export(cache, cache, model=Aliased(), export_path=tmp_path)
    graph = read_graph(tmp_path)
    ge_check(graph)
    inputs = [op for op in graph.op if op.type in {"Data", "RefData"}]
    assert [(op.type, op.name) for op in inputs] == [("RefData", "a")]
    (assign,) = [op for op in graph.op if op.type == "Assign"]
    assert assign.input[0] == "a:0"
    # Both uses read the written value: a + b is (a + 1) twice, as in eager.
    eager_cache = torch.full((2, 3), 2.0)
    expected = Aliased()(eager_cache, eager_cache)
    array = np.full((2, 3), 2.0, np.float32)
    (got,) = runtime.load(tmp_path).run(array)
    np.testing.assert_array_equal(got, expected.numpy())
    np.testing.assert_array_equal(array, eager_cache.numpy())


def test_a_tensor_passed_twice_by_keyword_keeps_its_first_name_and_dynamic_dims(
    tmp_path: Path,
) -> None:
    class CopyInto(torch.nn.Module):
        def forward(
            self, x: torch.Tensor, *, out: torch.Tensor, cache: torch.Tensor
        ) -> torch.Tensor:
            out.copy_(x * 2)
            return cache + 1

    buffer = torch.zeros(2, 4)
    dynamo_export(
        torch.ones(2, 4),
        out=buffer,
        cache=buffer,
        model=CopyInto(),
        export_path=tmp_path,
        dynamic_dims={"x": [0], "cache": [0]},  # the dropped name counts for the kept one
    )
    loaded = runtime.load(tmp_path)
    assert [(info.name, info.shape) for info in loaded.inputs] == [
        ("x", (-1, 4)),
        ("out", (-1, 4)),
    ]
    x, shared = np.full((3, 4), 1.5, np.float32), np.zeros((3, 4), np.float32)
    (got,) = loaded.run(x, shared)
    np.testing.assert_array_equal(shared, 2 * x)
    np.testing.assert_array_equal(got, 2 * x + 1)
