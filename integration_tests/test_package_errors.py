"""Every package's error module keeps the same contract (one parametrized test, not five copies).

Each distribution's version matches its metadata; every error class derives from the package's
one root error, keeps a builtin base (callers may catch ``ValueError`` and the like), and has a
``code`` of its own; warnings are ``UserWarning`` subclasses with a code. A bad option has one
name everywhere: ``ConfigError``, a ``ValueError``; an old name survives only as a declared,
deprecated alias of the same class.
"""

from __future__ import annotations

import enum
import importlib
from importlib.metadata import version

import pytest

PACKAGES = {
    "npu_streams": ("npu-streams", "NpuStreamsError"),
    "npu_mempool": ("npu-mempool", "NpuMempoolError"),
    "npu_static_kernel": ("npu-static-kernel", "NpuStaticKernelError"),
    "npu_graph_export": ("npu-graph-export", "NpuGraphExportError"),
    "npu_compile": ("npu-compile", "NpuCompileError"),
}
# Packages that take options (npu-streams has none: its tags and priorities are StreamTagError).
TAKES_OPTIONS = ["npu_compile", "npu_graph_export", "npu_mempool", "npu_static_kernel"]
# Old error names kept for callers: (package, old name) -> the class they now name.
DEPRECATED_ALIASES = {("npu_mempool", "OptionsError"): "ConfigError"}


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_version_matches_the_distribution(name: str) -> None:
    package = importlib.import_module(name)
    assert package.__version__ == version(PACKAGES[name][0])


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_errors_share_one_root_keep_a_builtin_and_have_their_own_codes(name: str) -> None:
    errors = importlib.import_module(f"{name}.errors")
    root = getattr(errors, PACKAGES[name][1])
    codes: dict[str, str] = {}
    for attribute in errors.__all__:
        cls = getattr(errors, attribute)
        assert isinstance(cls, type), attribute
        if issubclass(cls, enum.StrEnum):
            # Codes of another kind (npu-compile's FallbackReason): distinct non-empty strings.
            values = [member.value for member in cls]
            assert all(values), attribute
            assert len(set(values)) == len(values), attribute
            continue
        if (name, attribute) in DEPRECATED_ALIASES:
            assert cls is getattr(errors, DEPRECATED_ALIASES[name, attribute]), attribute
            continue
        assert cls.__name__ == attribute, f"{attribute} names {cls.__name__}: declare the alias"
        code = getattr(cls, "code", None)
        assert isinstance(code, str), f"{attribute} has no code"
        assert code, f"{attribute} has an empty code"
        if issubclass(cls, Warning):
            assert issubclass(cls, UserWarning), attribute
            continue
        assert issubclass(cls, root), f"{attribute} does not derive from {root.__name__}"
        if cls is not root:
            assert code not in codes, f"{attribute} and {codes.get(code)} share code {code!r}"
            codes[code] = attribute
        message = "what went wrong; what to do"
        try:
            error = cls(message)
        except TypeError:
            continue  # an error with required structured fields
        assert "what to do" in str(error)
    # The package re-exports its errors at the top level.
    package = importlib.import_module(name)
    assert getattr(package, PACKAGES[name][1]) is root


@pytest.mark.parametrize("name", TAKES_OPTIONS)
def test_a_bad_option_is_a_config_error_everywhere(name: str) -> None:
    errors = importlib.import_module(f"{name}.errors")
    config_error = errors.ConfigError
    assert "ConfigError" in errors.__all__
    assert issubclass(config_error, getattr(errors, PACKAGES[name][1]))
    assert issubclass(config_error, ValueError)
    # One bad option, one shape: no package adds another builtin base or its own code.
    assert not issubclass(config_error, TypeError)
    assert config_error.code == "config"
    assert importlib.import_module(name).ConfigError is config_error


@pytest.mark.parametrize(("name", "old"), sorted(DEPRECATED_ALIASES))
def test_deprecated_error_names_still_catch_the_new_class(name: str, old: str) -> None:
    errors = importlib.import_module(f"{name}.errors")
    new = getattr(errors, DEPRECATED_ALIASES[name, old])
    alias = getattr(importlib.import_module(name), old)
    assert alias is new
    assert old in errors.__all__  # still a promise of the package's API
    with pytest.raises(alias):
        raise new("raised under the new name")


def _counters() -> list[object]:
    import npu_compile
    import npu_mempool
    import npu_static_kernel

    return [
        npu_mempool.Counters(),
        npu_static_kernel.StaticKernelCounters(),
        npu_compile.get_npu_backend().stats,
    ]


@pytest.mark.parametrize("counters", _counters(), ids=lambda c: type(c).__name__)
def test_every_package_s_counters_snapshot_and_expect(counters: object) -> None:
    snapshot = counters.snapshot()  # type: ignore[attr-defined]
    assert isinstance(snapshot, dict)
    assert snapshot
    name = next(iter(snapshot))
    with counters.expect(**{name: 0}):  # type: ignore[attr-defined]
        pass
    with pytest.raises(AssertionError, match=name), counters.expect(**{name: 1}):  # type: ignore[attr-defined]
        pass
    with pytest.raises(TypeError), counters.expect(no_such_counter=1):  # type: ignore[attr-defined]
        pass
