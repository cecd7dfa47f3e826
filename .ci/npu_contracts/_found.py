"""What resolving a name finds, and a module's namespace as read from its source.

``ModuleFile`` is where a module is in the archives; ``Found``, ``Missing`` and ``Outside``
(together ``Resolution``) are the outcomes of following a name; ``_Namespace`` and ``_collect``
record the names a module binds at its top level without running it; ``_dotted`` and
``_call_shape`` read names and call shapes from the AST, for the resolver, the parameter checks
and the scan of our sources alike.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class ModuleFile:
    """Where a module's source (or stub, or C extension) is in the archives."""

    name: str
    path: str
    kind: Literal["python", "stub", "extension"]

    @property
    def package(self) -> bool:
        """Whether the module is a package (submodules are its attributes once imported)."""
        return self.path.endswith(("/__init__.py", "/__init__.pyi"))


FoundKind = Literal["module", "class", "function", "value", "binary", "op"]


@dataclass(frozen=True)
class Found:
    """A name that exists, and what it is."""

    kind: FoundKind
    #: ``path:line`` (or a binary's path) and what is there, for the report.
    evidence: str
    module: ModuleFile | None = None
    #: The class or function definition (for parameters and base classes).
    node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef | None = None
    #: Whether ``node`` is a function defined in a class body.
    method: bool = False
    #: For ``binary``: the package whose shared libraries hold the strings, the strings found
    #: so far along the name (``_distributed_c10d``, ``ProcessGroupHCCL``) and how the search
    #: got into a binary (a C extension without a stub, a C base class).
    top: str = ""
    strings: tuple[str, ...] = ()
    origin: str = ""
    #: For ``op``: the operator's schema parameters as a Python signature, ``"(self, *, x=...)"``.
    schema: str = ""


@dataclass(frozen=True)
class Missing:
    """Not found; ``looked`` says where the search went."""

    looked: tuple[str, ...]


@dataclass(frozen=True)
class Outside:
    """Reached something outside the archives (another distribution, a computed value)."""

    why: str
    #: The dotted name outside the archives, where there is one (``vllm.platforms.Platform``).
    name: str = ""


Resolution = Found | Missing | Outside


@dataclass
class _Namespace:
    """The names a module binds at its top level, without running it."""

    bindings: dict[str, list[tuple[ast.AST, bool]]] = field(default_factory=dict)
    stars: list[str] = field(default_factory=list)
    exports: set[str] | None = None
    getattr_strings: set[str] | None = None


def _collect(body: Sequence[ast.stmt], ns: _Namespace, module: ModuleFile, fallback: bool) -> None:
    """Record the bindings of straight-line module code (``if`` and ``try`` bodies included)."""
    for stmt in body:
        targets: list[str] = []
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            targets = [stmt.name]
            if stmt.name == "__getattr__" and not isinstance(stmt, ast.ClassDef):
                ns.getattr_strings = {
                    node.value
                    for node in ast.walk(stmt)
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                }
        elif isinstance(stmt, ast.Assign):
            targets = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
            if "__all__" in targets:
                ns.exports = _string_list(stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            targets = [stmt.target.id]
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            if stmt.target.id == "__all__" and ns.exports is not None:
                more = _string_list(stmt.value)
                ns.exports = None if more is None else ns.exports | more
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                ns.bindings.setdefault(alias.asname or alias.name.split(".")[0], []).append(
                    (alias, fallback)
                )
        elif isinstance(stmt, ast.ImportFrom):
            base = _absolute(module, stmt.level, stmt.module)
            for alias in stmt.names:
                if alias.name == "*":
                    ns.stars.append(base)
                else:
                    ns.bindings.setdefault(alias.asname or alias.name, []).append(
                        (ast.ImportFrom(module=base, names=[alias], level=0), fallback)
                    )
        elif isinstance(stmt, ast.If):
            _collect(stmt.body, ns, module, fallback)
            _collect(stmt.orelse, ns, module, fallback)
        elif isinstance(stmt, ast.Try):
            _collect(stmt.body + stmt.orelse + stmt.finalbody, ns, module, fallback)
            for handler in stmt.handlers:
                # `except ImportError: name = None` is the fallback, not the name's definition.
                _collect(handler.body, ns, module, True)
        for target in targets:
            ns.bindings.setdefault(target, []).append((stmt, fallback))


def _string_list(node: ast.expr) -> set[str] | None:
    if not isinstance(node, ast.List | ast.Tuple):
        return None
    names: set[str] = set()
    for element in node.elts:
        if not (isinstance(element, ast.Constant) and isinstance(element.value, str)):
            return None
        names.add(element.value)
    return names


def _absolute(module: ModuleFile, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    parts = module.name.split(".")
    if not module.package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, name] if name else parts)


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _call_shape(call: ast.Call) -> tuple[int, tuple[str, ...]] | None:
    """Positional count and keyword names of a call; None where ``*``/``**`` hide them."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return None
    return len(call.args), tuple(k.arg for k in call.keywords if k.arg is not None)
