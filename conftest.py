"""Root pytest configuration: fixtures shared by every package's tests and docstring examples.

Skips ``device``-marked tests without an accelerator; runs each docstring example in a temporary
directory; offers fresh Dynamo and tagged-event state, and the CLI checks.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

# npu_compile.vllm's compiler subclasses vLLM's CompilerInterface at import: without vLLM (every
# session but `nox -s vllm`) the docstring-example collection must not import it.
collect_ignore_glob = (
    []
    if importlib.util.find_spec("vllm") is not None
    else ["packages/npu-compile/src/npu_compile/vllm/_compiler.py"]
)


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
