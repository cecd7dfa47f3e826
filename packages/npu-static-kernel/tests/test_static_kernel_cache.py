"""ArtifactCache, cache keys, failed builds and node roles, with a cheap file-writing builder."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from npu_static_kernel import (
    ArtifactCache,
    BuildError,
    BuildRequest,
    CacheError,
    CacheFallbackWarning,
    ConfigError,
    InductorBuilder,
    StaticKernelBuilder,
    StaticKernelCompiler,
    StaticKernelDisabledWarning,
    StaticKernelFallbackWarning,
    compute_key,
)
from npu_static_kernel.cli import main as cli_main


class FileBuilder(StaticKernelBuilder):
    """Writes the graph code as its artifact; loads a wrapper that counts calls."""

    name = "file"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.built: list[str] = []

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        (out_dir / "part.txt").write_text("partial")
        if self.fail:
            raise BuildError("toolchain exploded; fix the toolchain")
        (out_dir / "graph.py").write_text(request.gm.code)
        self.built.append(request.key)

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        code = (artifact_dir / "graph.py").read_text()
        assert code == request.gm.code
        return request.gm.forward


def graph_fn(x: torch.Tensor, n: int) -> tuple[torch.Tensor]:
    return (torch.ops.aten.mul.Tensor(x, n),)


GM = torch.fx.symbolic_trace(graph_fn)


def test_build_commit_lookup_and_index(tmp_path: Path) -> None:
    builder = FileBuilder()
    compiler = StaticKernelCompiler(tmp_path, builder=builder, strict=True)
    fn = compiler.compile_static(GM, [torch.ones(3), 2])
    assert fn(torch.ones(3), 2)[0].tolist() == [2.0, 2.0, 2.0]
    (key,) = builder.built
    cache = ArtifactCache(tmp_path)
    entry = cache.lookup(key)
    assert entry == tmp_path / "static_kernel_cache" / "entries" / key
    index = json.loads((cache.root / "index.json").read_text())
    assert index[key]["builder"] == "file"
    assert index[key]["inputs"] == ["float32[3]", "int=2"]
    (listed,) = cache.entries()
    assert listed.key == key
    assert listed.size_bytes > 0
    assert listed.path == str(entry)
    # An int argument is part of the key: a new value is a new artifact.
    compiler.compile_static(GM, [torch.ones(3), 5])
    assert len(builder.built) == 2
    assert len(cache.entries()) == 2


def test_failed_build_leaves_nothing_and_falls_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    compiler = StaticKernelCompiler(tmp_path, builder=FileBuilder(fail=True))
    with (
        caplog.at_level(logging.WARNING, logger="npu_static_kernel"),
        pytest.warns(StaticKernelFallbackWarning, match="toolchain exploded"),
    ):
        fn = compiler.compile_static(GM, [torch.ones(3), 2])
    assert fn == GM.forward
    assert compiler.counters.fallbacks == 1
    assert "toolchain exploded" in caplog.text
    cache = ArtifactCache(tmp_path)
    assert cache.entries() == []
    assert list((cache.root / "entries").iterdir()) == []
    strict = StaticKernelCompiler(tmp_path, builder=FileBuilder(fail=True), strict=True)
    with pytest.raises(BuildError, match="toolchain exploded"):
        strict.compile_static(GM, [torch.ones(3), 2])


def test_leftover_staging_is_discarded_by_the_next_build(tmp_path: Path) -> None:
    args = [torch.ones(3), 2]
    builder = FileBuilder()
    key = compute_key(GM, args, builder)
    cache = ArtifactCache(tmp_path)
    leftover = cache.staging(key)
    (leftover / "part.txt").write_text("from a killed build")
    StaticKernelCompiler(tmp_path, builder=builder, strict=True).compile_static(GM, args)
    assert not leftover.exists()
    assert cache.lookup(key) is not None


def test_damaged_entry_is_rebuilt_and_damaged_index_is_recovered(tmp_path: Path) -> None:
    args = [torch.ones(3), 2]
    builder = FileBuilder()
    StaticKernelCompiler(tmp_path, builder=builder, strict=True).compile_static(GM, args)
    cache = ArtifactCache(tmp_path)
    (key,) = builder.built
    (cache.entry_dir(key) / "meta.json").write_text("{not json")
    assert cache.lookup(key) is None
    StaticKernelCompiler(tmp_path, builder=builder, strict=True).compile_static(GM, args)
    assert builder.built == [key, key]
    assert cache.lookup(key) is not None
    (cache.root / "index.json").write_text("garbage")
    assert [e.key for e in cache.entries()] == [key]


def test_lock_held_by_another_process_times_out(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    with cache.key_lock("ab" * 32):  # creates the lock directory
        pass
    holder = (
        "import filelock, sys\n"
        "lock = filelock.FileLock(sys.argv[1]); lock.acquire()\n"
        "print('held', flush=True); sys.stdin.read()\n"
    )
    lock_file = cache.root / "locks" / f"{'ab' * 32}.lock"
    with subprocess.Popen(
        [sys.executable, "-c", holder, str(lock_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "held\n"
        with (
            pytest.raises(CacheError, match="another process holds the build lock"),
            cache.key_lock("ab" * 32, timeout=0),
        ):
            pass
        proc.communicate("")
    with cache.key_lock("ab" * 32, timeout=0):  # released when the holder exits
        pass
    assert issubclass(CacheError, OSError)


def test_key_covers_shapes_dtypes_strides_ints_graph_and_builder() -> None:
    x = torch.ones(4, 4)
    base = compute_key(GM, [x, 2], FileBuilder())
    assert base == compute_key(GM, [torch.zeros(4, 4), 2], FileBuilder())  # values do not matter
    other_graph = torch.fx.symbolic_trace(lambda x, n: (torch.ops.aten.add.Tensor(x, n),))
    variants = [
        compute_key(GM, [torch.ones(4, 5), 2], FileBuilder()),
        compute_key(GM, [x.half(), 2], FileBuilder()),
        compute_key(GM, [x.t().contiguous().t(), 2], FileBuilder()),  # same shape, other strides
        compute_key(GM, [x, 3], FileBuilder()),
        compute_key(other_graph, [x, 2], FileBuilder()),
        compute_key(GM, [x, 2], InductorBuilder()),
        compute_key(GM, [x, 2], InductorBuilder({"max_autotune": True})),
    ]
    assert len({base, *variants}) == len(variants) + 1


@pytest.fixture(autouse=True)
def _fresh_node_role() -> Any:
    from npu_static_kernel import _distributed

    _distributed._forget()
    yield
    _distributed._forget()


def _fake_distributed(monkeypatch: pytest.MonkeyPatch, rank: int, world: int) -> list[list[int]]:
    groups: list[list[int]] = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: world)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: rank)

    def new_group(ranks: list[int], **kwargs: Any) -> str:
        groups.append(ranks)
        return f"group{len(groups)}"

    monkeypatch.setattr(dist, "new_group", new_group)
    monkeypatch.setattr(dist, "barrier", lambda group=None: None)
    return groups


def test_multi_process_without_local_world_size_warns_once_and_turns_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_distributed(monkeypatch, rank=1, world=2)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    builder = FileBuilder()
    compiler = StaticKernelCompiler(tmp_path, builder=builder)
    with pytest.warns(StaticKernelDisabledWarning, match="export LOCAL_WORLD_SIZE"):
        assert compiler.compile_static(GM, [torch.ones(3), 2]) == GM.forward
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither a second graph nor a second compiler warns again
        assert compiler.compile_static(GM, [torch.ones(4), 2]) == GM.forward
        other = StaticKernelCompiler(tmp_path, builder=builder)
        assert other.compile_static(GM, [torch.ones(4), 2]) == GM.forward
    assert not compiler.enabled
    assert not other.enabled
    assert builder.built == []
    assert compiler.counters.records == 0


@pytest.mark.parametrize(("value", "match"), [("abc", "not a positive integer"), ("3", "divide")])
def test_bad_local_world_size_is_a_config_error_when_strict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, match: str
) -> None:
    _fake_distributed(monkeypatch, rank=0, world=4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
    compiler = StaticKernelCompiler(tmp_path, builder=FileBuilder(), strict=True)
    with pytest.raises(ConfigError, match=match) as info:
        compiler.compile_static(GM, [torch.ones(3), 2])
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("value", "match"), [("abc", "not a positive integer"), ("3", "divide")])
def test_bad_local_world_size_warns_and_turns_off_when_not_strict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, match: str
) -> None:
    _fake_distributed(monkeypatch, rank=0, world=4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
    builder = FileBuilder()
    compiler = StaticKernelCompiler(tmp_path, builder=builder)
    with pytest.warns(StaticKernelDisabledWarning, match=match):
        assert compiler.compile_static(GM, [torch.ones(3), 2]) == GM.forward
    assert not compiler.enabled
    assert builder.built == []


def test_only_local_rank_zero_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    groups = _fake_distributed(monkeypatch, rank=5, world=8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    builder = FileBuilder()
    follower = StaticKernelCompiler(tmp_path, builder=builder)
    with pytest.warns(StaticKernelFallbackWarning, match="local rank 0 logged why"):
        assert follower.compile_static(GM, [torch.ones(3), 2]) == GM.forward
    assert groups == [[0, 1, 2, 3], [4, 5, 6, 7]]  # every rank creates every node's group
    # Rank 5 is local rank 1: it waits for its node's builder and, with no artifact, falls back.
    assert builder.built == []
    assert follower.counters.fallbacks == 1

    StaticKernelCompiler(tmp_path, builder=builder).compile_static(GM, [torch.ones(5), 2])
    assert len(groups) == 2  # a second compiler reuses the node groups

    monkeypatch.setattr(dist, "get_rank", lambda group=None: 4)
    leader = StaticKernelCompiler(tmp_path, builder=builder)
    leader.compile_static(GM, [torch.ones(3), 2])
    assert len(builder.built) == 1
    assert leader.counters.installs == 1


def test_cli_version_and_empty_listing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli_main(["--version"])
    assert info.value.code == 0
    assert "npu-static-kernel" in capsys.readouterr().out
    assert cli_main(["clean", "--build-dir", str(tmp_path)]) == 0
    assert "removed 0 artifact(s)" in capsys.readouterr().out


class BrokenArtifactBuilder(FileBuilder):
    name = "broken"

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        def broken(*args: Any) -> Any:
            raise RuntimeError("illegal instruction in kernel")

        return broken


def test_artifact_failing_its_first_run_falls_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    compiler = StaticKernelCompiler(tmp_path, builder=BrokenArtifactBuilder())
    with (
        caplog.at_level(logging.WARNING, logger="npu_static_kernel"),
        pytest.warns(StaticKernelFallbackWarning, match="illegal instruction"),
    ):
        fn = compiler.compile_static(GM, [torch.ones(3), 2])
    assert fn == GM.forward
    assert compiler.counters.fallbacks == 1
    assert "failed its first run" in caplog.text
    assert "illegal instruction" in caplog.text


def test_key_includes_the_device_index_on_cuda() -> None:
    # Inductor's CUDA code pins the index it was built on: cuda:1 must not load a cuda:0 artifact.
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    mode = FakeTensorMode()

    def on(device: str) -> torch.Tensor:
        return FakeTensor(mode, torch.empty(4, 4, device="meta"), torch.device(device))

    builder = FileBuilder()
    assert compute_key(GM, [on("cuda:0"), 2], builder) != compute_key(
        GM, [on("cuda:1"), 2], builder
    )
    assert compute_key(GM, [on("cuda:0"), 2], builder) == compute_key(
        GM, [on("cuda:0"), 2], builder
    )


def test_per_device_follower_builds_its_own_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from npu_static_kernel import _device

    _fake_distributed(monkeypatch, rank=5, world=8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setattr(_device, "binds_device_index", lambda device_type: True)  # as on CUDA
    builder = FileBuilder()
    follower = StaticKernelCompiler(tmp_path, builder=builder, strict=True)
    follower.compile_static(GM, [torch.ones(3), 2])
    assert len(builder.built) == 1
    assert (follower.counters.builds, follower.counters.loads) == (1, 1)


def test_unwritable_build_dir_falls_back_with_a_clear_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    # Neither the build directory nor the fallback for read-only build directories is usable.
    monkeypatch.setenv("NPU_STATIC_KERNEL_FALLBACK_DIR", str(not_a_dir))
    builder = FileBuilder()
    compiler = StaticKernelCompiler(not_a_dir, builder=builder)
    with (
        caplog.at_level(logging.WARNING, logger="npu_static_kernel"),
        pytest.warns(CacheFallbackWarning, match="not writable"),
        pytest.warns(StaticKernelFallbackWarning, match="cannot write op statistics"),
    ):
        assert compiler.compile_static(GM, [torch.ones(3), 2]) == GM.forward
    assert compiler.counters.fallbacks == 1
    assert "cannot write op statistics" in caplog.text
    assert builder.built == []
    strict = StaticKernelCompiler(not_a_dir, builder=builder, strict=True)
    with pytest.raises(CacheError, match="writable directory"):
        strict.compile_static(GM, [torch.ones(3), 2])


class CheckedFileBuilder(FileBuilder):
    name = "checked"

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        if (artifact_dir / "graph.py").read_text() != request.gm.code:
            raise CacheError(f"checksum mismatch in {artifact_dir}")
        return request.gm.forward


def test_unreadable_artifact_is_discarded_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    args = [torch.ones(3), 2]
    builder = CheckedFileBuilder()
    StaticKernelCompiler(tmp_path, builder=builder, strict=True).compile_static(GM, args)
    (key,) = builder.built
    (ArtifactCache(tmp_path).entry_dir(key) / "graph.py").write_text("truncat")
    compiler = StaticKernelCompiler(tmp_path, builder=builder, strict=True)
    with caplog.at_level(logging.WARNING, logger="npu_static_kernel"):
        compiler.compile_static(GM, args)
    assert "discarding the unreadable artifact" in caplog.text
    assert builder.built == [key, key]
    assert (compiler.counters.loads, compiler.counters.fallbacks) == (1, 0)
    assert (ArtifactCache(tmp_path).entry_dir(key) / "graph.py").read_text() == GM.code


def test_cli_clean_with_an_empty_key_removes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    StaticKernelCompiler(tmp_path, builder=FileBuilder(), strict=True).compile_static(
        GM, [torch.ones(3), 2]
    )
    assert cli_main(["clean", "--key", "", "--build-dir", str(tmp_path)]) == 2
    assert "needs a key prefix" in capsys.readouterr().err
    assert len(ArtifactCache(tmp_path).entries()) == 1


def test_cache_write_error_falls_back_instead_of_crashing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def disk_full(self: ArtifactCache, entry: Any, staging: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ArtifactCache, "commit", disk_full)
    compiler = StaticKernelCompiler(tmp_path, builder=FileBuilder())
    with (
        caplog.at_level(logging.WARNING, logger="npu_static_kernel"),
        pytest.warns(StaticKernelFallbackWarning, match="No space left on device"),
    ):
        assert compiler.compile_static(GM, [torch.ones(3), 2]) == GM.forward
    assert "No space left on device" in caplog.text
    assert compiler.counters.fallbacks == 1
    assert not list((tmp_path / "static_kernel_cache" / "entries").iterdir())


def test_listing_creates_nothing(tmp_path: Path) -> None:
    StaticKernelCompiler(tmp_path, builder=FileBuilder(), strict=True).compile_static(
        GM, [torch.ones(3), 2]
    )
    cache = ArtifactCache(tmp_path)
    for lock in (cache.root / "locks").iterdir():
        lock.unlink()
    (cache.root / "locks").rmdir()
    (cache.root / "index.json.lock").unlink(missing_ok=True)
    assert len(cache.entries()) == 1
    assert cli_main(["list", "--build-dir", str(tmp_path)]) == 0
    assert not (cache.root / "locks").exists()
    assert not (cache.root / "index.json.lock").exists()


class OnceUnloadableBuilder(FileBuilder):
    """Its artifacts verify (files intact) but the first load fails, as after a toolchain change."""

    name = "once-unloadable"

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        self.loads += 1
        if self.loads == 1:
            raise CacheError("the artifact was made by another toolchain")
        return super().load(artifact_dir, request)


def test_verified_artifact_that_fails_to_load_is_discarded_and_rebuilt_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    args = [torch.ones(3), 2]
    StaticKernelCompiler(tmp_path, builder=FileBuilder(), strict=True).compile_static(GM, args)
    builder = OnceUnloadableBuilder()
    builder_key = compute_key(GM, args, builder)
    compiler = StaticKernelCompiler(tmp_path, builder=builder, strict=True)
    with caplog.at_level(logging.WARNING, logger="npu_static_kernel"):
        fn = compiler.compile_static(GM, args)  # builds, the load fails, rebuilds, loads
    assert fn(torch.ones(3), 2)[0].tolist() == [2.0, 2.0, 2.0]
    assert builder.built == [builder_key, builder_key]
    assert caplog.text.count("discarding the unreadable artifact") == 1
    assert (compiler.counters.loads, compiler.counters.fallbacks) == (1, 0)
