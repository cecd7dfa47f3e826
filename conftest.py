"""Root pytest configuration: fixtures shared by every package's tests and docstring examples.

Collects the code blocks of the documentation (``testing/doc_blocks.py``); skips ``device``-marked
tests without an accelerator; runs each docstring example in a temporary directory; offers fresh
Dynamo and tagged-event state, the CLI checks, and the capture counts a device's warm-up need
implies (``warmup_calls``, ``graph_counts``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

# npu_compile.vllm's compiler subclasses vLLM's CompilerInterface at import: without vLLM (every
# session but `nox -s vllm`) the docstring-example collection must not import it.
collect_ignore_glob = (
    []
    if importlib.util.find_spec("vllm") is not None
    else ["packages/npu-compile/src/npu_compile/vllm/_compiler.py"]
)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """The fenced code blocks of the documentation, as tests (``testing/doc_blocks.py``)."""
    if file_path.suffix != ".md":
        return None
    # pytest offers every file of a directory it walks through, even on the way to one test file
    # (`pytest packages/x/tests/test_y.py` walks the root and sees README.md): only a Markdown
    # file the run asked for, itself or by a directory above it, is collected. Sybil is then
    # imported only by a run of the documentation: the device suite's test runs, on a machine
    # without Sybil, never reach it.
    session = parent.session
    if not any(session.isinitpath(path) for path in (file_path, *file_path.parents)):
        return None
    from doc_blocks import collect

    collected: pytest.Collector | None = collect(file_path, parent)
    return collected


def _accelerator_available() -> bool:
    import torch

    return bool(torch.accelerator.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any(item.get_closest_marker("device") for item in items) and not _accelerator_available():
        skip = pytest.mark.skip(reason="needs an accelerator (CUDA or NPU); none is available")
        for item in items:
            if item.get_closest_marker("device"):
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _doctest_in_tmp_dir(request: pytest.FixtureRequest) -> None:
    """Run each docstring example in a temporary current directory.

    An example writes where its reader would (``export_path="out"``, the default build
    directory), and nothing lands in the checkout. Ordinary tests keep the directory pytest was
    started from; they ask for nothing here, so their fixture order is unchanged.
    """
    if isinstance(request.node, pytest.DoctestItem):
        tmp_path = request.getfixturevalue("tmp_path")
        request.getfixturevalue("monkeypatch").chdir(tmp_path)


def _warmup_calls(device: Any) -> int:
    """Eager calls a new graph key gets on ``device`` before its capture: the device's need.

    CUDA libraries initialise on first use, which must not happen inside a capture, so a runner
    there calls each new key once eagerly first; the CPU emulation and NPUs capture at once.
    Measured through a runner's counters, as users see it, rather than assumed.
    """
    import npu_mempool
    import torch

    runner = npu_mempool.GraphRunner(lambda x: x + 1, name="warm-up probe")
    x = torch.zeros(1, device=device)
    for _ in range(8):
        runner(x)
        if runner.counters.captures:
            return int(runner.counters.eager_calls)
    raise AssertionError(f"a runner on {device} captured nothing in 8 calls: {runner.counters}")


@pytest.fixture
def warmup_calls() -> Callable[[Any], int]:
    """``warmup_calls(device)``: eager calls per new graph key before its capture there."""
    return _warmup_calls


def _graph_counts(keys: Sequence[object], warmup: int) -> dict[str, int]:
    """Captures, replays and eager calls of one runner called with graph ``keys`` in turn.

    Each new key runs ``warmup`` times eagerly, is captured on the next call, and replays on
    every call after that; no output is held across calls (one call path).
    """
    calls: dict[object, int] = {}
    counts = {"captures": 0, "replays": 0, "eager_calls": 0}
    for key in keys:
        calls[key] = calls.get(key, 0) + 1
        if calls[key] <= warmup:
            counts["eager_calls"] += 1
        elif calls[key] == warmup + 1:
            counts["captures"] += 1
        else:
            counts["replays"] += 1
    return counts


@pytest.fixture
def graph_counts() -> Callable[[Sequence[object], int], dict[str, int]]:
    """``graph_counts(keys, warmup)``: the counter moves of a runner called with ``keys``."""
    return _graph_counts


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Reset ``torch._dynamo`` before and after the test: it compiles from scratch.

    No graph cached (nor recompile counted) by an earlier test answers its calls.
    """
    import torch

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def fresh_tagged_events() -> Iterator[None]:
    """Clear npu-streams' process-wide tagged-event registry before and after the test."""
    import npu_streams

    npu_streams.reset_tagged_events()
    yield
    npu_streams.reset_tagged_events()


def _argparse_problems(parser: argparse.ArgumentParser) -> list[str]:
    """Arguments of ``parser`` (and its subcommands) with no help, or a default the help hides."""
    problems = []
    pending = [parser]
    while pending:
        each = pending.pop()
        formatter = each.formatter_class(prog=each.prog)
        for action in each._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            name = f"{each.prog} {'/'.join(action.option_strings) or action.dest}"
            if not action.help:
                problems.append(f"{name}: no help")
                continue
            shown = formatter._get_help_string(action) or ""
            if action.default not in (None, False, argparse.SUPPRESS) and "default" not in shown:
                problems.append(f"{name}: default {action.default!r} not shown")
    return problems


@pytest.fixture
def argparse_problems() -> Callable[[argparse.ArgumentParser], list[str]]:
    """What a CLI's ``--help`` leaves out: arguments without help, defaults not shown."""
    return _argparse_problems


def _closed_pipe_run(module: str) -> tuple[str, int]:
    """Run ``python -m <module> --help`` with its stdout closed by the reader first.

    Output into a pipe is block-buffered (as in ``<cli> ... | head``), so the write fails at the
    flush. Returns the command's stderr and exit code.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with subprocess.Popen(
        [sys.executable, "-m", module, "--help"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()
        err = process.stderr.read().decode()
        code = process.wait(timeout=300)
    return err, code


@pytest.fixture
def closed_pipe_run() -> Callable[[str], tuple[str, int]]:
    """Run a CLI module whose reader went away: ``(stderr, exit code)``."""
    return _closed_pipe_run


# Private torch APIs: each package lists the ones it relies on in its
# `tests/test_*_torch_private.py` (see docs/torch-compat.md), which checks the list against the
# installed torch with these functions.
# A name is private when a part of it starts with an underscore, or when it lives under
# torch.fx.experimental / torch.fx.passes (no compatibility promise either). Operator namespaces
# (torch.ops.*) are left out: an op that goes missing fails where the op is looked up, by name.
_UNPROMISED = ("torch.fx.experimental.", "torch.fx.passes.")


def _is_private_torch_name(dotted: str) -> bool:
    if dotted.startswith("torch.ops."):
        return False
    parts = dotted.split(".")[1:]
    dunder = ("__", "__")
    private = any(p.startswith("_") and (p[:2], p[-2:]) != dunder for p in parts)
    return private or dotted.startswith(_UNPROMISED)


def _dotted(node: object) -> list[str] | None:
    import ast

    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _private_torch_names_in(path: Path) -> dict[str, int]:
    """Private torch names one source file reaches statically: imports, attributes, getattr."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = {"torch": "torch"}  # local name -> the torch path it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch" and alias.asname:
                    bound[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found: dict[str, int] = {}

    def record(parts: list[str] | None, line: int) -> None:
        if parts and parts[0] in bound:
            name = ".".join([bound[parts[0]], *parts[1:]])
            if _is_private_torch_name(name):
                found.setdefault(name, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_private_torch_name(alias.name):
                    found.setdefault(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                record([alias.asname or alias.name], node.lineno)
        elif isinstance(node, ast.Attribute):
            record(_dotted(node), node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            base = _dotted(node.args[0])
            record(None if base is None else [*base, node.args[1].value], node.lineno)
    # `a.b.c` also walks `a.b`: keep only the longest names.
    return {n: line for n, line in found.items() if not any(o.startswith(f"{n}.") for o in found)}


def _resolve_torch_name(name: str) -> object:
    """The object a dotted name stands for: the longest importable module, then attributes.

    A dataclass field without a class-level default counts as present when the class declares it.
    """
    import importlib

    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            if split == 1:
                raise
            continue
        break
    for index in range(split, len(parts)):
        attr = parts[index]
        if hasattr(value, attr):
            value = getattr(value, attr)
            continue
        fields = getattr(value, "__dataclass_fields__", {})
        if attr in fields and index == len(parts) - 1:
            return fields[attr]
        owner = ".".join(parts[:index])
        raise AttributeError(f"{owner} has no attribute {attr!r}")
    return value


class PrivateTorchApis:
    """Checks of a package's list of private torch APIs against the installed torch."""

    def check(self, api: Any, package: str) -> None:
        """Fail (or, for an entry the code only probes, skip) naming ``api`` if it moved."""
        import torch

        needs = getattr(api, "needs", "")
        if needs == "cuda" and not torch.backends.cuda.is_built():
            pytest.skip(f"{api.name} exists in CUDA builds of torch only; this one is CPU-only")
        if needs == "torch_npu" and importlib.util.find_spec("torch_npu") is None:
            pytest.skip(f"{api.name} is torch_npu's; torch_npu is not installed")
        probe = getattr(api, "probe", None)
        try:
            if probe is not None:
                probe()
            else:
                _resolve_torch_name(api.name)
        except Exception as error:
            where = f"torch {torch.__version__} has no {api.name} ({api.area})"
            why = f"{package} uses it: {api.use} [{type(error).__name__}: {error}]"
            if api.optional:
                pytest.skip(f"{where}; {why}; without it: {api.optional}")
            pytest.fail(
                f"{where}; {why}. Find where it went, adapt the caller with a capability check "
                f"(never a version comparison) and update the list in {package}'s tests; "
                "docs/torch-compat.md has the checklist",
                pytrace=False,
            )

    def unlisted(self, package_dir: Path, apis: Sequence[Any]) -> list[str]:
        """Private torch names the package's sources use that ``apis`` does not list."""
        listed = {api.name for api in apis}
        missing = []
        for path in sorted(package_dir.rglob("*.py")):
            for name, line in _private_torch_names_in(path).items():
                if name not in listed:
                    missing.append(f"{name} ({path.relative_to(package_dir.parent)}:{line})")
        return missing

    def unused(self, package_dir: Path, apis: Sequence[Any]) -> list[str]:
        """Listed names whose last part appears nowhere in the package's other sources."""
        text = "\n".join(path.read_text(encoding="utf-8") for path in package_dir.rglob("*.py"))
        return [api.name for api in apis if api.name.rsplit(".", 1)[-1] not in text]


@pytest.fixture
def private_torch_apis() -> PrivateTorchApis:
    """Resolve and scan a package's list of private torch APIs (``test_*_torch_private.py``)."""
    return PrivateTorchApis()
