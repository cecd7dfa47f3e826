"""How the ``npu-static-kernel`` command line behaves around its commands."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest
from npu_static_kernel import cli


class _Parsed(Exception):
    pass


def _parser(monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser ``main`` builds, caught when it starts parsing."""

    def catch(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Parsed(self)

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", catch)
        with pytest.raises(_Parsed) as info:
            cli.main(["list"])
    parser = info.value.args[0]
    assert isinstance(parser, argparse.ArgumentParser)
    return parser


def test_every_argument_has_help_and_shows_its_default(
    monkeypatch: pytest.MonkeyPatch,
    argparse_problems: Callable[[argparse.ArgumentParser], list[str]],
) -> None:
    assert argparse_problems(_parser(monkeypatch)) == []


def test_ctrl_c_exits_130_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_list", interrupted)
    assert cli.main(["list", "--build-dir", str(tmp_path)]) == 130
    assert capsys.readouterr().err == "npu-static-kernel: interrupted\n"


def test_a_closed_pipe_ends_quietly(
    closed_pipe_run: Callable[[str], tuple[str, int]],
) -> None:
    err, code = closed_pipe_run("npu_static_kernel")
    assert err == ""
    assert code == 141
