"""Paths: a link at any level of the build directory is refused, every legal name works.

The rule is in docs/paths.md: the build directory is trusted as given, nothing below it is
followed if it is a symbolic link, and a full disk is a CacheError that names the file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from npu_static_kernel import (
    ArtifactCache,
    BuildError,
    BuildRequest,
    CacheError,
    ConfigError,
    InductorBuilder,
    StaticKernelBuilder,
    StaticKernelCompiler,
    StaticKernelFallbackWarning,
)
from npu_static_kernel.cli import main as cli_main


class ScaleBuilder(StaticKernelBuilder):
    """The artifact is the graph's scale factor as text, padded to ``pad`` bytes."""

    name = "paths-scale"

    def __init__(self, pad: int = 0) -> None:
        self.pad = pad

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        (out_dir / "scale.txt").write_text(str(request.args[1]) + " " * self.pad)

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        scale = float((artifact_dir / "scale.txt").read_text())
        return lambda x, n: (x * scale,)


def _graph(x: torch.Tensor, n: int) -> tuple[torch.Tensor]:
    return (torch.ops.aten.mul.Tensor(x, n),)


GM = torch.fx.symbolic_trace(_graph)


def _build(build_dir: Path, n: int = 2, pad: int = 0) -> StaticKernelCompiler:
    compiler = StaticKernelCompiler(build_dir, builder=ScaleBuilder(pad), strict=True)
    out = compiler.compile_static(GM, [torch.ones(2), n])(torch.ones(2), n)
    assert out[0].tolist() == [float(n)] * 2
    return compiler


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root`` (links as links) with the bytes of regular files."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        found[name] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return found


# ---------------------------------------------------------------------------- links at each level

# Where a link can be planted, and the operations that go through that place.
_LEVELS = {
    "static_kernel_cache": ("build", "unpack", "clean", "list", "pack"),
    "static_kernel_cache/entries": ("build", "unpack", "clean", "list", "pack"),
    "static_kernel_cache/locks": ("build", "unpack", "clean"),
    "static_kernel_cache/index.json": ("build", "unpack", "clean"),
    "aclnn_static_shape_kernel_outputs": ("build",),
}
_CASES = [(level, operation) for level, operations in _LEVELS.items() for operation in operations]


@pytest.fixture
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive of one artifact (n=7) made by ``pack`` in a clean directory."""
    source = tmp_path_factory.mktemp("source")
    _build(source, n=7)
    path = source / "kernels.tar.gz"
    assert cli_main(["pack", str(path), "--build-dir", str(source)]) == 0
    return path


@pytest.mark.parametrize(("level", "operation"), _CASES, ids=[f"{lv}-{op}" for lv, op in _CASES])
def test_a_link_at_each_level_is_refused_and_nothing_is_written_through_it(
    tmp_path: Path,
    archive: Path,
    capsys: pytest.CaptureFixture[str],
    level: str,
    operation: str,
) -> None:
    build_dir = tmp_path / "build"
    _build(build_dir, n=2)  # an earlier artifact, and every directory exists
    planted = build_dir / level
    elsewhere = tmp_path / "elsewhere"
    os.replace(planted, elsewhere)  # what the link leads to: the real content, moved away
    planted.symlink_to(elsewhere, target_is_directory=elsewhere.is_dir())
    before = _tree(elsewhere) if elsewhere.is_dir() else {"": elsewhere.read_bytes()}
    capsys.readouterr()

    if operation == "build":
        with pytest.raises(CacheError, match="symbolic link") as info:
            _build(build_dir, n=3)
        message = str(info.value)
    else:
        argv = {
            "unpack": ["unpack", str(archive)],
            "clean": ["clean"],
            "list": ["list"],
            "pack": ["pack", str(tmp_path / "out.tar.gz")],
        }[operation]
        assert cli_main([*argv, "--build-dir", str(build_dir)]) == 2
        message = capsys.readouterr().err
        assert message.count("\n") == 1

    assert "symbolic link" in message
    assert str(planted) in message or str(build_dir / level.split("/")[0]) in message
    after = _tree(elsewhere) if elsewhere.is_dir() else {"": elsewhere.read_bytes()}
    assert after == before  # nothing written, renamed or removed through the link
    assert not (tmp_path / "out.tar.gz").exists()


def test_a_lock_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    build_dir = tmp_path / "build"
    compiler = _build(build_dir, n=2)
    (key,) = [e.key for e in compiler.cache.entries()]
    victim = tmp_path / "victim"
    victim.write_text("keep")
    lock = compiler.cache.root / "locks" / f"{key}.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim)
    with pytest.raises(CacheError, match="symbolic link"):
        compiler.cache.remove(key)
    assert victim.read_text() == "keep"
    assert compiler.cache.lookup(key) is not None


def test_a_planted_link_makes_a_lenient_build_warn_once_with_the_cause(tmp_path: Path) -> None:
    build_dir = tmp_path / "build"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    build_dir.mkdir()
    (build_dir / "static_kernel_cache").symlink_to(elsewhere, target_is_directory=True)
    compiler = StaticKernelCompiler(build_dir, builder=ScaleBuilder())
    with pytest.warns(StaticKernelFallbackWarning, match="static_kernel_cache is a symbolic link"):
        assert compiler.compile_static(GM, [torch.ones(2), 2]) == GM.forward
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second shape: counted and logged, not warned again
        assert compiler.compile_static(GM, [torch.ones(2), 3]) == GM.forward
    assert compiler.counters.fallbacks == 2
    assert compiler.last_fallback_reason is not None
    assert "symbolic link" in compiler.last_fallback_reason
    assert list(elsewhere.iterdir()) == []


# ---------------------------------------------------------------------------- every legal name

# Spaces, quotes, shell characters, leading dashes, non-ASCII letters and symbols, long names.
_NAME = st.text(
    alphabet=st.sampled_from(list(" -_.'\"$;&()[]#~*?!abcXYZ019") + list("üïçéø✓日本語😀")),
    min_size=1,
    max_size=40,
).filter(lambda name: name not in {".", ".."})
_NAMES = st.one_of(
    _NAME,
    _NAME.map(lambda name: "-" + name),
    st.integers(min_value=100, max_value=250).map(lambda n: "é" * (n // 2)),  # long: 250 bytes
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=_NAMES, other=_NAMES)
def test_every_legal_build_dir_name_works(name: str, other: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        build_dir = Path(tmp) / name / "build"
        first = _build(build_dir, n=4)
        assert (first.counters.builds, first.counters.loads) == (1, 1)
        again = _build(build_dir, n=4)
        assert (again.counters.builds, again.counters.hits) == (0, 1)
        archive = Path(tmp) / name / "kernels.tar.gz"
        assert cli_main(["pack", str(archive), f"--build-dir={build_dir}"]) == 0
        target = Path(tmp) / other / "copy"
        assert cli_main(["unpack", str(archive), f"--build-dir={target}"]) == 0
        assert [e.inputs for e in ArtifactCache(target).entries()] == [("float32[2]", "int=4")]
        assert _build(target, n=4).counters.hits == 1
        assert cli_main(["clean", f"--build-dir={target}"]) == 0
        assert ArtifactCache(target).entries() == []


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "empty path"),
        ("build\0dir", "NUL byte"),
        ("x" * 256, "at most 255 bytes per name"),
        ("/".join(["d" * 200] * 20), "limit of 4096 bytes"),
    ],
    ids=["empty", "nul", "long-name", "long-path"],
)
def test_paths_no_file_system_takes_are_config_errors_at_once(value: str, why: str) -> None:
    for make in (ArtifactCache, StaticKernelCompiler):
        with pytest.raises(ConfigError, match=why):
            make(value)
    with pytest.raises(ConfigError, match=why):
        StaticKernelCompiler(fallback_dir=value)


def test_inductor_builds_in_a_directory_with_spaces_and_unicode(tmp_path: Path) -> None:
    # Inductor's C++ compile command cut such a path at the space: every build failed.
    def graph(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.ops.aten.relu.default(torch.ops.aten.mm.default(x, w)),)

    gm = torch.fx.symbolic_trace(graph)
    args = [torch.randn(2, 3), torch.randn(3, 4)]
    build_dir = tmp_path / "dir with spaces" / "ünïcødé ✓"
    compiler = StaticKernelCompiler(build_dir, builder=InductorBuilder(), strict=True)
    fn = compiler.compile_static(gm, args)
    assert (compiler.counters.builds, compiler.counters.loads) == (1, 1)
    torch.testing.assert_close(fn(*args)[0], gm(*args)[0])
    (entry,) = ArtifactCache(build_dir).entries()
    assert any(name.startswith("inductor_cache/") for name in entry.files)


def test_the_warning_gives_the_compiler_s_first_error_line(tmp_path: Path) -> None:
    class Failing(ScaleBuilder):
        name = "paths-failing"

        def build(self, request: BuildRequest, out_dir: Path) -> None:
            raise BuildError(
                "Inductor could not compile the graph (C++ compile error\n\nCommand:\ng++ "
                "/a b/k.cpp -o /a b/k.so\n\nOutput:\ng++: fatal error: input file '/a' is the "
                "same as output file\ncompilation terminated.\n)"
            )

    for build_dir in (tmp_path / "one", tmp_path / "two"):  # one warning per build directory
        compiler = StaticKernelCompiler(build_dir, builder=Failing())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for n in (2, 3):
                compiler.compile_static(GM, [torch.ones(2), n])
        (warning,) = [w for w in caught if w.category is StaticKernelFallbackWarning]
        assert str(build_dir) in str(warning.message)
        assert "g++: fatal error: input file '/a' is the same as output file" in str(
            warning.message
        )
        assert compiler.counters.fallbacks == 2


# ---------------------------------------------------------------------------- full disks

_FULL_DISK_CHILD = """
import json, resource, sys
from pathlib import Path
from npu_static_kernel import ArtifactCache, CacheError
from npu_static_kernel._pack import unpack_cache
from npu_static_kernel.cli import main

archive, build_dir, how = sys.argv[1], sys.argv[2], sys.argv[3]
limit = 16 << 10  # every file this process writes stops at 16 KiB: a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
if how == "cli":
    sys.exit(main(["unpack", archive, "--build-dir", build_dir]))
try:
    unpack_cache(Path(archive), ArtifactCache(build_dir))
except CacheError as error:
    print(json.dumps({"type": type(error).__name__, "message": str(error)}))
"""


@pytest.mark.parametrize("how", ["api", "cli"])
def test_a_full_disk_names_the_file_and_keeps_earlier_artifacts(tmp_path: Path, how: str) -> None:
    source = tmp_path / "source"
    _build(source, n=5, pad=64 << 10)  # a 64 KiB artifact file
    archive = tmp_path / "big.tar.gz"
    assert cli_main(["pack", str(archive), "--build-dir", str(source)]) == 0
    build_dir = tmp_path / "build"
    _build(build_dir, n=2)  # an earlier artifact, which must stay intact
    before = _tree(build_dir)
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_CHILD, str(archive), str(build_dir), how],
        capture_output=True,
        text=True,
        check=False,
    )
    if how == "cli":
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1
        message = done.stderr
    else:
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["type"] == "CacheError"
        message = result["message"]
    assert "File too large" in message
    assert "scale.txt" in message  # the file that could not be written
    assert "free space" in message
    assert _tree(build_dir) == before  # no partial artifact, no staging left, the old one kept
    assert [e.inputs for e in ArtifactCache(build_dir).entries()] == [("float32[2]", "int=2")]
