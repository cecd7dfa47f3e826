"""Our sources: the torch_npu, ``torch.npu`` and vllm_ascend names one of our modules uses.

``npu_names_used`` reads a module statically (imports, attribute chains, ``getattr`` and
``hasattr`` with constant names, string constants that spell such a name) so that the tests can
check every name our packages reach is listed in the inventory; ``is_npu_name`` is the scope.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from ._found import _dotted

_ROOTS = ("torch_npu", "vllm_ascend")
_NAME = re.compile(r"(?:torch_npu|vllm_ascend)(?:\.[A-Za-z_]\w*)*")


def is_npu_name(dotted: str) -> bool:
    """Whether a dotted name is in the inventory's scope: torch_npu, torch.npu, vllm_ascend."""
    return (
        dotted.split(".")[0] in _ROOTS or dotted == "torch.npu" or dotted.startswith("torch.npu.")
    )


def npu_names_used(source: str) -> dict[str, int]:
    """The torch_npu / ``torch.npu`` / vllm_ascend names one of our modules reaches, by first line.

    Seen statically: imports; attribute chains from a name bound to one of them (an import, a
    local assigned from one, a helper that returns ``importlib.import_module("torch_npu")``);
    ``getattr``/``hasattr`` with a constant name or a loop over constant names; and string
    constants that spell such a name (``find_spec("vllm_ascend")``, ``("vllm_ascend.platform",
    "NPUPlatform")``), docstrings, f-strings, dict keys and subscripts left out. Only the longest
    names are kept: ``torch_npu.npu.Stream`` covers ``torch_npu.npu``.
    """
    tree = ast.parse(source)
    bound: dict[str, str] = {}
    helpers: dict[str, str] = {}
    loops: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound.setdefault(alias.name.split(".")[0], alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif (
            isinstance(node, ast.For)
            and isinstance(node.target, ast.Name)
            and isinstance(node.iter, ast.Tuple | ast.List)
        ):
            constants = [e.value for e in node.iter.elts if isinstance(e, ast.Constant)]
            if constants and all(isinstance(v, str) for v in constants):
                loops[node.target.id] = tuple(str(v) for v in constants)

    def imported(call: ast.Call) -> str | None:
        """The module a literal ``importlib.import_module("...")`` (or ``find_spec``) names."""
        func = _dotted(call.func)
        if func is None:
            return None
        head, _, rest = func.partition(".")
        full = ".".join(filter(None, (bound.get(head, head), rest)))
        first = call.args[0] if call.args else None
        if (
            full in ("importlib.import_module", "importlib.util.find_spec")
            and isinstance(first, ast.Constant)
            and isinstance(first.value, str)
        ):
            return first.value
        return None

    def names_of(expr: ast.expr) -> list[str]:
        if isinstance(expr, ast.Name):
            return [bound[expr.id]] if expr.id in bound else []
        if isinstance(expr, ast.Attribute):
            return [f"{base}.{expr.attr}" for base in names_of(expr.value)]
        if isinstance(expr, ast.Call):
            module = imported(expr)
            if module is not None:
                return [module]
            if isinstance(expr.func, ast.Name):
                if expr.func.id in helpers and not expr.args:
                    return [helpers[expr.func.id]]
                if expr.func.id in ("getattr", "hasattr") and len(expr.args) >= 2:
                    attr = expr.args[1]
                    if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                        attrs: tuple[str, ...] = (attr.value,)
                    elif isinstance(attr, ast.Name) and attr.id in loops:
                        attrs = loops[attr.id]
                    else:
                        return []
                    return [f"{b}.{a}" for b in names_of(expr.args[0]) for a in attrs]
        return []

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Call):
                    module = imported(inner.value)
                    if module is not None and is_npu_name(module):
                        helpers[node.name] = module
    for _ in range(2):  # a local assigned from another local
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                values = [n for n in names_of(node.value) if is_npu_name(n)]
                if values:
                    bound.setdefault(node.targets[0].id, values[0])

    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skipped.add(id(node.value))  # docstrings
        elif isinstance(node, ast.JoinedStr):
            skipped.update(id(v) for v in node.values)
        elif isinstance(node, ast.Dict):
            skipped.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            skipped.add(id(node.slice))

    found: dict[str, int] = {}

    def record(names: Iterable[str], line: int) -> None:
        for name in names:
            if is_npu_name(name):
                found.setdefault(name, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            record((alias.name for alias in node.names), node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            record((f"{node.module}.{alias.name}" for alias in node.names), node.lineno)
        elif isinstance(node, ast.Attribute | ast.Call):
            record(names_of(node), node.lineno)
        elif isinstance(node, ast.Tuple) and len(node.elts) == 2:
            # ("vllm_ascend.platform", "NPUPlatform"): a module and a name to import from it.
            head, tail = node.elts
            if (
                isinstance(head, ast.Constant)
                and isinstance(head.value, str)
                and _NAME.fullmatch(head.value)
                and isinstance(tail, ast.Constant)
                and isinstance(tail.value, str)
                and tail.value.isidentifier()
            ):
                record([f"{head.value}.{tail.value}"], node.lineno)
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skipped
            and _NAME.fullmatch(node.value)
        ):
            record([node.value], node.lineno)
    return {n: line for n, line in found.items() if not any(o.startswith(f"{n}.") for o in found)}
