"""One-line reasons: the line of a long error that says what went wrong."""

from __future__ import annotations

import re

__all__ = ["first_error_line"]

_ERROR_WORD = re.compile(r"\b(error|fatal|failed|cannot|denied)\b", re.IGNORECASE)


def first_error_line(error: BaseException) -> str:
    """The line that says what went wrong: the compiler's first error line when there is one.

    A build error embeds the compiler's command and output (Inductor's ``CppCompileError``,
    ``op_compiler``'s tail): its own first line only says that a compile failed, so the first
    line of the output that names an error is added to it.
    """
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    head = lines[0]
    _, marker, output = text.partition("Output:")
    candidates = output.splitlines() if marker else lines[1:]
    for line in candidates:
        line = line.strip()
        if line and _ERROR_WORD.search(line) and not line.startswith("Command"):
            return f"{head}: {line}" if line not in head else head
    return head
