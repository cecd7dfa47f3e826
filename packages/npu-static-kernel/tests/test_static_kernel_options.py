"""StaticKernelOptions: frozen, checked at construction, the same through keywords or options=."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from npu_static_kernel import (
    BuildError,
    BuildRequest,
    ConfigError,
    StaticKernelBuilder,
    StaticKernelCompiler,
    StaticKernelFallbackWarning,
    StaticKernelOptions,
)


class FailingBuilder(StaticKernelBuilder):
    name = "options-failing"

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        raise BuildError("the toolchain refused this graph")

    def load(self, artifact_dir: Path, request: BuildRequest) -> Any:
        raise AssertionError("nothing was built, so nothing is loaded")


def _graph(x: torch.Tensor) -> tuple[torch.Tensor]:
    return (torch.ops.aten.mul.Tensor(x, 2),)


GM = torch.fx.symbolic_trace(_graph)

BAD = [
    ({"strict": "no"}, "strict must be True or False, got 'no'"),
    ({"strict": 1}, "strict must be True or False, got 1"),
    ({"strict": None}, "strict must be True or False, got None"),
    ({"build_dir": 3}, "the build directory must be a path .*got int"),
    ({"build_dir": b"build"}, "the build directory must be a path .*got bytes"),
    ({"build_dir": ""}, "the build directory is an empty path"),
    ({"build_dir": "build\0dir"}, "NUL byte"),
    ({"fallback_dir": ""}, "fallback_dir is an empty path"),
    ({"fallback_dir": ["x"]}, "fallback_dir must be a path .*got list"),
]


@pytest.mark.parametrize(("fields", "message"), BAD, ids=[str(f) for f, _ in BAD])
def test_a_bad_setting_is_a_config_error_at_construction(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as options_error:
        StaticKernelOptions(**fields)
    # The keyword arguments of the compiler are checked by the same code, before any build.
    with pytest.raises(ConfigError, match=message) as keywords_error:
        StaticKernelCompiler(**fields)
    for error in (options_error.value, keywords_error.value):
        assert error.code == "config"
        assert "\n" not in str(error)


def test_options_are_frozen_and_keep_paths_as_paths(tmp_path: Path) -> None:
    options = StaticKernelOptions(build_dir=str(tmp_path), fallback_dir=tmp_path / "fallback")
    assert options.build_dir == tmp_path
    assert options.fallback_dir == tmp_path / "fallback"
    assert options == StaticKernelOptions(build_dir=tmp_path, fallback_dir=tmp_path / "fallback")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.strict = True  # type: ignore[misc]
    compiler = StaticKernelCompiler(options=options)
    with pytest.raises(dataclasses.FrozenInstanceError):
        compiler.options.build_dir = tmp_path / "elsewhere"  # type: ignore[misc]


def test_keywords_and_options_make_the_same_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    by_keywords = StaticKernelCompiler("build", strict=True, fallback_dir="fallback")
    by_options = StaticKernelCompiler(
        options=StaticKernelOptions(build_dir="build", strict=True, fallback_dir="fallback")
    )
    assert by_keywords.options == by_options.options
    for compiler in (by_keywords, by_options):
        # Relative paths are made absolute against the directory current at construction.
        assert compiler.build_dir == tmp_path / "build"
        assert compiler.cache.root.parent == tmp_path / "build"
        assert compiler.strict is True
    # No arguments at all: the current directory, not strict.
    default = StaticKernelCompiler()
    assert default.options == StaticKernelOptions()
    assert (default.build_dir, default.strict) == (tmp_path, False)


@pytest.mark.parametrize("strict", [True, False])
def test_strict_from_options_decides_what_a_failed_build_does(tmp_path: Path, strict: bool) -> None:
    compiler = StaticKernelCompiler(
        options=StaticKernelOptions(build_dir=tmp_path, strict=strict), builder=FailingBuilder()
    )
    args = [torch.ones(3)]
    if strict:
        with pytest.raises(BuildError, match="the toolchain refused this graph"):
            compiler.compile_static(GM, args)
        return
    with pytest.warns(StaticKernelFallbackWarning, match="the toolchain refused this graph"):
        fn = compiler.compile_static(GM, args)
    assert fn == GM.forward
    assert compiler.counters.fallbacks == 1


@pytest.mark.parametrize(
    "keywords",
    [{"build_dir": "elsewhere"}, {"strict": True}, {"fallback_dir": "elsewhere"}],
    ids=["build_dir", "strict", "fallback_dir"],
)
def test_options_and_keywords_together_are_refused(
    tmp_path: Path, keywords: dict[str, Any]
) -> None:
    with pytest.raises(ConfigError, match="options= was given together with"):
        StaticKernelCompiler(options=StaticKernelOptions(build_dir=tmp_path), **keywords)


def test_options_of_another_type_are_refused() -> None:
    with pytest.raises(ConfigError, match="options must be a StaticKernelOptions, got dict"):
        StaticKernelCompiler(options={"strict": True})  # type: ignore[arg-type]
