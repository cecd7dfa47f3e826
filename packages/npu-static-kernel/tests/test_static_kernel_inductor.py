"""InductorBuilder via StaticKernelCompiler: static-shape artifacts equal eager, mutations too."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from npu_static_kernel import (
    ArtifactCache,
    InductorBuilder,
    StaticKernelCompiler,
    compute_key,
)
from npu_static_kernel.cli import main as cli_main


def graph_fn(buf: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
    # The shape of an AOT-autograd inference graph with keep_inference_input_mutations=True.
    hidden = torch.ops.aten.relu.default(torch.ops.aten.mm.default(x, w))
    torch.ops.aten.copy_.default(buf, torch.ops.aten.add.Tensor(buf, hidden))
    return (torch.ops.aten.mul.Tensor(hidden, 2.0),)


def make_args(rows: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(rows)
    return [
        torch.zeros(rows, 8),
        torch.randn(rows, 16, generator=gen),
        torch.randn(16, 8, generator=gen),
    ]


def clone(args: list[Any]) -> list[Any]:
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


@dataclass
class Built:
    build_dir: Path
    gm: torch.fx.GraphModule
    args: list[torch.Tensor]
    compiler: StaticKernelCompiler
    fn: Callable[..., Any]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    build_dir = tmp_path_factory.mktemp("inductor")
    gm = torch.fx.symbolic_trace(graph_fn)
    args = make_args(4)
    compiler = StaticKernelCompiler(build_dir, strict=True)
    fn = compiler.compile_static(gm, args)
    return Built(build_dir, gm, args, compiler, fn)


def test_outputs_and_input_mutation_match_eager(built: Built) -> None:
    assert built.fn != built.gm.forward
    compiled_args, eager_args = clone(built.args), clone(built.args)
    out = built.fn(*compiled_args)
    ref = built.gm(*eager_args)
    assert isinstance(out, tuple)
    assert len(out) == 1
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(compiled_args[0], eager_args[0])
    assert compiled_args[0].abs().sum() > 0  # the aten.copy_ into the input happened
    out2 = built.fn(*compiled_args)  # and happens again on every call
    torch.testing.assert_close(compiled_args[0], 2 * eager_args[0])
    torch.testing.assert_close(out2, ref)


def test_recording_runs_on_copies_of_mutated_inputs(built: Built) -> None:
    assert torch.count_nonzero(built.args[0]) == 0
    assert built.compiler.counters.records == 1
    stats = built.compiler.last_statistics
    assert stats is not None
    assert "MatMulV2_float_ND_4_16_0.json" in stats.selected
    assert any(name.startswith("ViewCopy_float_ND_4_8_") for name in stats.selected)


def test_artifact_carries_the_compiled_kernels(built: Built) -> None:
    key = compute_key(built.gm, built.args, InductorBuilder())
    path = ArtifactCache(built.build_dir).lookup(key)
    assert path is not None
    assert sorted(p.name for p in path.iterdir()) == [
        "inductor_artifact.bin",
        "inductor_cache",
        "inductor_cpu_isa.json",
        "meta.json",
    ]
    meta = json.loads((path / "meta.json").read_text())
    assert meta["builder"] == "inductor"
    # Every file is hashed, and the C++ kernels Inductor compiled travel with the artifact.
    assert "inductor_artifact.bin" in meta["files"]
    assert any(name.endswith(".so") for name in meta["files"])
    assert not any(name.startswith("inductor_cache/locks/") for name in meta["files"])
    assert meta["inputs"] == [
        "float32[4, 8]",
        "float32[4, 16]",
        "float32[16, 8]",
    ]
    assert built.compiler.counters.builds == 1
    assert built.compiler.counters.loads == 1


def test_second_compiler_loads_without_building(built: Built) -> None:
    other = StaticKernelCompiler(built.build_dir, strict=True)
    fn = other.compile_static(built.gm, built.args)
    assert (other.counters.builds, other.counters.hits, other.counters.loads) == (0, 1, 1)
    args = clone(built.args)
    torch.testing.assert_close(fn(*args), built.gm(*clone(built.args)))


def test_copied_cache_loads_with_an_empty_inductor_cache_without_compiling(
    built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build directory copied to another machine (another path, empty Inductor cache)."""
    from npu_static_kernel.builders import _inductor
    from torch._inductor.utils import clear_caches

    copy = tmp_path / "image" / "build"
    shutil.copytree(built.build_dir, copy)
    empty = tmp_path / "empty-inductor-cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(empty))
    clear_caches()  # forget the kernels this process already loaded
    other = StaticKernelCompiler(copy, strict=True)
    fn = other.compile_static(built.gm, built.args)
    assert (other.counters.builds, other.counters.hits, other.counters.loads) == (0, 1, 1)
    compiled_args, eager_args = clone(built.args), clone(built.args)
    torch.testing.assert_close(fn(*compiled_args), built.gm(*eager_args))
    torch.testing.assert_close(compiled_args[0], eager_args[0])
    # Nothing was compiled: no kernel appeared in the process's Inductor cache, and the private
    # copy the artifact was loaded from holds exactly the kernels the artifact carried.
    assert not [p for p in empty.rglob("*") if p.suffix in (".so", ".cpp")]
    key = compute_key(built.gm, built.args, InductorBuilder())
    carried = {p.name for p in (copy / "static_kernel_cache" / "entries" / key).rglob("*.so")}
    assert _inductor._load_root is not None
    loaded = {p.name for p in _inductor._load_root.rglob("*.so")}
    assert carried
    assert loaded == carried


def test_same_key_twice_returns_the_loaded_callable(built: Built) -> None:
    before = built.compiler.counters.records
    assert built.compiler.compile_static(built.gm, built.args) is built.fn
    assert built.compiler.counters.records == before


def test_every_new_shape_gets_its_own_kernels(built: Built) -> None:
    compiler = StaticKernelCompiler(built.build_dir, strict=True)
    small = make_args(2)
    fn = compiler.compile_static(built.gm, small)
    assert compiler.counters.builds == 1
    assert compute_key(built.gm, small, InductorBuilder()) != compute_key(
        built.gm, built.args, InductorBuilder()
    )
    stats = compiler.last_statistics
    assert stats is not None
    assert "MatMulV2_float_ND_2_16_0.json" in stats.selected
    compiled_args, eager_args = clone(small), clone(small)
    torch.testing.assert_close(fn(*compiled_args), built.gm(*eager_args))
    torch.testing.assert_close(compiled_args[0], eager_args[0])


def test_cli_lists_and_cleans(
    built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_dir = tmp_path / "copy"
    shutil.copytree(built.build_dir, build_dir)
    keys = [e.key for e in ArtifactCache(build_dir).entries()]
    assert keys
    assert cli_main(["list", "--build-dir", str(build_dir)]) == 0
    table = capsys.readouterr().out
    assert all(key[:12] in table for key in keys)
    assert "inductor" in table
    assert cli_main(["list", "--json", "--build-dir", str(build_dir)]) == 0
    assert sorted(e["key"] for e in json.loads(capsys.readouterr().out)) == sorted(keys)
    assert cli_main(["clean", "--key", keys[0][:10], "--build-dir", str(build_dir)]) == 0
    assert [e.key for e in ArtifactCache(build_dir).entries()] == keys[1:]
    assert cli_main(["clean", "--key", "zzzz", "--build-dir", str(build_dir)]) == 2
    assert cli_main(["clean", "--records", "--build-dir", str(build_dir)]) == 0
    assert ArtifactCache(build_dir).entries() == []
    assert not (build_dir / "aclnn_static_shape_kernel_outputs").exists()
    capsys.readouterr()
    assert cli_main(["list", "--build-dir", str(build_dir)]) == 0
    assert "no static kernel artifacts" in capsys.readouterr().out


def test_through_aot_autograd_like_the_backend(tmp_path: Path) -> None:
    """The npu-compile path: AOT autograd forward graph, compile_static on its first real call."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    compiler = StaticKernelCompiler(tmp_path, strict=True)

    def fw_compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        state: dict[str, Callable[..., Any]] = {}

        def run(*args: Any) -> Any:
            if "fn" not in state:
                state["fn"] = compiler.compile_static(gm, list(args))
            return state["fn"](*args)

        return make_boxed_func(run)

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=fw_compiler, keep_inference_input_mutations=True
        )

    def model(x: torch.Tensor, w: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        # The literal becomes a ``_tensor_constant0`` attribute of the AOT graph: a loaded
        # artifact must still receive it (it used to fail with too few arguments).
        y = x @ w + torch.tensor([1.0, 2.0, 3.0, 4.0])
        cache.add_(y)
        return torch.softmax(y, dim=-1)

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    x, w = torch.randn(3, 5), torch.randn(5, 4)
    cache, eager_cache = torch.zeros(3, 4), torch.zeros(3, 4)
    with torch.no_grad():
        out = compiled(x, w, cache)
        out = compiled(x, w, cache)
    ref = model(x, w, eager_cache)
    ref = model(x, w, eager_cache)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(cache, eager_cache)
    assert compiler.counters.builds == 1
    assert compiler.counters.loads == 1
    torch._dynamo.reset()


class _FakeArtifact:
    def save(self, *, path: str, format: str) -> None:
        Path(path).write_bytes(b"artifact")


def _request() -> Any:
    from npu_static_kernel import BuildRequest

    gm = torch.fx.symbolic_trace(graph_fn)
    return BuildRequest(gm, make_args(2), None, "ab" * 32, "cpu")


def test_standalone_compile_keywords_follow_the_installed_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch 2.11's standalone_compile has no donate_graph_module; 2.13's has."""
    import torch._inductor as inductor

    calls: list[Any] = []

    def torch_2_11(
        gm: Any, example_inputs: Any, *, dynamic_shapes: Any, options: Any, aot: bool = False
    ) -> Any:
        calls.append("2.11")
        return _FakeArtifact()

    def torch_2_13(
        gm: Any,
        example_inputs: Any,
        *,
        dynamic_shapes: Any,
        options: Any,
        aot: bool = False,
        donate_graph_module: bool = False,
    ) -> Any:
        calls.append(("2.13", donate_graph_module))
        return _FakeArtifact()

    for fake in (torch_2_11, torch_2_13):
        monkeypatch.setattr(inductor, "standalone_compile", fake)
        out = tmp_path / fake.__name__
        out.mkdir()
        InductorBuilder().build(_request(), out)
        assert (out / "inductor_artifact.bin").read_bytes() == b"artifact"
    assert calls == ["2.11", ("2.13", True)]


def test_build_without_inductor_cache_redirection_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A torch without temporary_cache_dir builds the plain artifact (no kernel bundle)."""
    import torch._inductor as inductor
    from npu_static_kernel.builders import _inductor

    monkeypatch.setattr(_inductor, "_cache_dir_context", lambda: None)
    monkeypatch.setattr(
        inductor, "standalone_compile", lambda gm, inputs, **kwargs: _FakeArtifact()
    )
    InductorBuilder().build(_request(), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inductor_artifact.bin"]


def test_loading_skips_the_vector_isa_probe_only_while_it_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inside the load the build's ISA is used: no test program compiled, no header precompiled."""
    from npu_static_kernel.builders import _inductor
    from torch._inductor import codecache, cpu_vec_isa

    def no_compiler(self: Any, code: str) -> bool:
        raise AssertionError("the ISA probe compiled a test program")

    def precompile(header: str, command: str, **options: Any) -> str:
        return f"precompiled {header}"

    monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build", no_compiler)
    monkeypatch.setattr(codecache, "_precompile_header", precompile)
    pick = cpu_vec_isa.pick_vec_isa
    advertised = [isa for isa in cpu_vec_isa.supported_vec_isa_list if _advertised(isa)]
    if not advertised:
        pytest.skip("this CPU advertises no vector ISA Inductor knows")
    cpu_vec_isa.valid_vec_isa_list.cache_clear()
    try:
        for isa in advertised:
            for bf16 in (True, False):
                built = {"isa": str(isa), "avx512_bf16": bf16}
                with _inductor._trust_the_bundled_isa(built):
                    chosen = codecache.pick_vec_isa()  # what loading C++ kernels asks
                    assert cpu_vec_isa.pick_vec_isa() is chosen
                    assert str(chosen) == str(isa)
                    assert chosen is not isa
                    assert getattr(chosen, "_is_avx512_bf16_supported", bf16) is bf16
                    assert codecache._precompile_header("h.h", "g++") == os.devnull
                    # Another thread compiling meanwhile gets Inductor's own answer.
                    with concurrent.futures.ThreadPoolExecutor(1) as pool:
                        other = pool.submit(codecache._precompile_header, "h.h", "g++")
                        assert other.result() == "precompiled h.h"
                assert cpu_vec_isa.valid_vec_isa_list.cache_info().currsize == 0  # not kept
                assert cpu_vec_isa.VecISA.check_build is no_compiler
                assert (codecache._precompile_header, cpu_vec_isa.pick_vec_isa) == (
                    precompile,
                    pick,
                )
                assert codecache.pick_vec_isa is pick
    finally:
        cpu_vec_isa.valid_vec_isa_list.cache_clear()


def _advertised(isa: Any) -> bool:
    from torch._inductor import cpu_vec_isa

    return all(flag in cpu_vec_isa.x86_isa_checker() for flag in str(isa).split())


def counter_graph(
    cache: torch.Tensor, position: torch.Tensor, x: torch.Tensor
) -> tuple[torch.Tensor]:
    # A decode step as AOT autograd leaves it: write the new row at `position` (a KV cache),
    # then advance the position in place, as transformers' static caches do with their counters.
    written = torch.ops.aten.index_copy.default(
        cache, 0, torch.ops.aten.view.default(position, [1]), x
    )
    torch.ops.aten.copy_.default(cache, written)
    torch.ops.aten.copy_.default(position, torch.ops.aten.add.Tensor(position, 1))
    return (torch.ops.aten.sum.dim_IntList(written, [0]),)


def test_a_graph_advancing_its_position_input_loads(tmp_path: Path) -> None:
    # The last free row: a position advanced once too often (the recording's run, then the
    # first run on the same copies) writes past the end and the artifact was thrown away.
    gm = torch.fx.symbolic_trace(counter_graph)
    args = [torch.zeros(3, 4), torch.tensor(2), torch.randn(1, 4)]
    compiler = StaticKernelCompiler(tmp_path, strict=True)
    fn = compiler.compile_static(gm, args)
    assert fn != gm.forward
    assert compiler.counters.loads == 1
    assert args[1].item() == 2  # the caller's arguments are untouched
    assert torch.count_nonzero(args[0]) == 0
    compiled_args, eager_args = clone(args), clone(args)
    torch.testing.assert_close(fn(*compiled_args), gm(*eager_args))
    torch.testing.assert_close(compiled_args[0], eager_args[0])
    assert compiled_args[1].item() == eager_args[1].item() == 3


def test_inputs_made_under_inference_mode_build_and_load_either_way(tmp_path: Path) -> None:
    # The build runs on a fresh thread: without the caller's inference mode there, tracing the
    # copy_ into an inference tensor fails and the graph silently runs without static kernels.
    gm = torch.fx.symbolic_trace(graph_fn)
    with torch.inference_mode():
        args = make_args(4)
        compiler = StaticKernelCompiler(tmp_path, strict=True)
        fn = compiler.compile_static(gm, args)
        assert fn != gm.forward
        compiled_args, eager_args = clone(args), clone(args)
        torch.testing.assert_close(fn(*compiled_args), gm(*eager_args))
        torch.testing.assert_close(compiled_args[0], eager_args[0])
    # The artifact serves a caller outside inference mode too (another process, say).
    again = StaticKernelCompiler(tmp_path, strict=True)
    plain = make_args(4)
    with torch.no_grad():
        fn = again.compile_static(gm, plain)
        assert fn != gm.forward
        assert again.counters.builds == 0
        compiled_args, eager_args = clone(plain), clone(plain)
        torch.testing.assert_close(fn(*compiled_args), gm(*eager_args))
        torch.testing.assert_close(compiled_args[0], eager_args[0])
