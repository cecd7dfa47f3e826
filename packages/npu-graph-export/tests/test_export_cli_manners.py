"""How the ``npu-graph-export`` command line behaves around its commands."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest
from npu_graph_export import cli


def test_every_argument_has_help_and_shows_its_default(
    argparse_problems: Callable[[argparse.ArgumentParser], list[str]],
) -> None:
    assert argparse_problems(cli._parser()) == []


def test_ctrl_c_exits_130_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_cmd_inspect", interrupted)
    assert cli.main(["inspect", "anything.air"]) == 130
    assert capsys.readouterr().err == "npu-graph-export: interrupted\n"


def test_a_closed_pipe_ends_quietly(
    closed_pipe_run: Callable[[str], tuple[str, int]],
) -> None:
    err, code = closed_pipe_run("npu_graph_export")
    assert err == ""
    assert code == 141


def test_lazy_public_names_are_listed_by_dir() -> None:
    import npu_graph_export

    listed = dir(npu_graph_export)
    for name in npu_graph_export.__all__:
        assert name in listed, f"dir(npu_graph_export) misses {name}"
