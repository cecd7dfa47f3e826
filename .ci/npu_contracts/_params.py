"""Parameters: the calls the inventory lists, bound to the parameters of what was found.

``parse_call`` reads a call as the inventory writes it (``"(a, b, key=c)"``); ``bind_problem``
says why such a call would not bind to a function's parameters; the helpers beside them give a
function's decorators, its signature for the report and its parameter names for comparing an
override with the method it overrides.
"""

from __future__ import annotations

import ast

from ._found import _call_shape, _dotted


def parse_call(text: str) -> tuple[int, tuple[str, ...]]:
    """``"(a, b, key=c)"`` as written in the inventory: positional count and keyword names."""
    try:
        node = ast.parse(f"_{text}", mode="eval").body
    except SyntaxError as error:
        raise SystemExit(f"not a call's arguments: {text!r} ({error.msg})") from None
    shape = _call_shape(node) if isinstance(node, ast.Call) else None
    if shape is None:
        raise SystemExit(f"write a call as its arguments, without * or **: {text!r}")
    return shape


def _decorators(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set()
    for decorator in node.decorator_list:
        dotted = _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator)
        if dotted is not None:
            names.add(dotted.rsplit(".", 1)[-1])
    return names


def _signature_text(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    return f"{node.name}({ast.unparse(node.args)})"


def bind_problem(args: ast.arguments, skip_first: bool, call: tuple[int, tuple[str, ...]]) -> str:
    """Why a call with ``call``'s shape would not bind to ``args`` ('' when it binds)."""
    count, keywords = call
    ordered = [*args.posonlyargs, *args.args]
    with_default = {a.arg for a in ordered[len(ordered) - len(args.defaults) :]}
    positional_only = {a.arg for a in args.posonlyargs}
    if skip_first and ordered:
        ordered = ordered[1:]
    names = [a.arg for a in ordered]
    if count > len(names) and args.vararg is None:
        return f"takes {len(names)} positional argument(s), we pass {count}"
    filled = set(names[:count])
    keyword_only = {a.arg for a in args.kwonlyargs}
    for keyword in keywords:
        if keyword in filled:
            return f"{keyword} would be given twice (by position and by keyword)"
        if keyword in positional_only and args.kwarg is None:
            return f"{keyword} is positional-only"
        if keyword in names or keyword in keyword_only:
            filled.add(keyword)
        elif args.kwarg is None:
            return f"has no parameter {keyword}"
    required = [n for n in names if n not in with_default] + [
        a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None
    ]
    missing = [n for n in required if n not in filled]
    if missing:
        return f"requires {', '.join(missing)}, which we do not pass"
    return ""


def _parameter_names(args: ast.arguments, skip_first: bool) -> list[str]:
    ordered = [a.arg for a in [*args.posonlyargs, *args.args]][1 if skip_first else 0 :]
    if args.vararg is not None:
        ordered.append(f"*{args.vararg.arg}")
    ordered += [f"{a.arg}=" for a in args.kwonlyargs]
    if args.kwarg is not None:
        ordered.append(f"**{args.kwarg.arg}")
    return ordered
