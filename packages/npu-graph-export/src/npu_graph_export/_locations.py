"""Where in the user's code something came from, read from the stack traces torch records.

An FX node's ``stack_trace`` and Dynamo's error texts list every frame from the export call down
to the op, torch's own functions last (``F.pad`` ends in ``torch/nn/functional.py``). A refusal
points at the deepest frame that is not torch's: the line a user can change.
"""

from __future__ import annotations

import os
import re
import sys
from functools import cache

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


@cache
def _torch_dir() -> str:
    import torch

    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _is_torch(path: str) -> bool:
    return os.path.abspath(path).startswith(_torch_dir())


def short_path(path: str) -> str:
    """``path`` relative to the import root or working directory that holds it, else as is.

    ``/venv/lib/python3.11/site-packages/transformers/models/swin/modeling_swin.py`` becomes
    ``transformers/models/swin/modeling_swin.py``: the name a reader finds the file by.
    """
    full = os.path.abspath(path)
    roots = [os.getcwd(), *(p for p in sys.path if p)]
    best = ""
    for root in roots:
        base = os.path.abspath(root).rstrip(os.sep) + os.sep
        if full.startswith(base) and len(base) > len(best):
            best = base
    return full[len(best) :] if best else path


def frames(text: str) -> list[tuple[str, int, str, str]]:
    """The ``(file, line, function, code)`` frames of a Python traceback text, outermost first."""
    lines = text.splitlines()
    found: list[tuple[str, int, str, str]] = []
    for index, line in enumerate(lines):
        match = _FRAME.match(line)
        if match is None:
            continue
        code = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if _FRAME.match(code) or set(code) <= {"^", "~", " "}:
            code = ""
        found.append((match["file"], int(match["line"]), match["func"], code))
    return found


def user_frame(text: str) -> str | None:
    """The deepest frame of ``text`` outside torch, as ``file:line in function``; else None."""
    for file, line, func, _ in reversed(frames(text)):
        if not _is_torch(file):
            return f"{short_path(file)}:{line} in {func}"
    return None


def user_line(text: str) -> str | None:
    """As :func:`user_frame`, followed by that line's code when the traceback shows it."""
    for file, line, func, code in reversed(frames(text)):
        if not _is_torch(file):
            where = f"{short_path(file)}:{line} in {func}"
            return f"{where}: {code}" if code else where
    return None


_CAUSE = re.compile(r"^\s*Caused by:\s*(?P<cause>.+?)\s*$")
_TORCH_FRAME = re.compile(r"\s*\((?:_dynamo|_subclasses|fx|_export|export)/[^()]*\)\s*$")


def torch_cause(text: str) -> str | None:
    """The line of user code torch blames in an error ``text``, or None.

    Dynamo names it after ``Caused by:`` for a guard on a data-dependent value (``if x.sum():``
    ``# modeling_longformer.py:549 in forward``), followed by the torch function that evaluated
    the guard, which is left out. Otherwise the last user frame of its ``from user code:``
    stack.
    """
    for line in text.splitlines():
        match = _CAUSE.match(line)
        if match:
            return _TORCH_FRAME.sub("", match["cause"]).strip() or None
    return user_line(text)
