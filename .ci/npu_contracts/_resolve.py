"""Resolving names: the ``Resolver`` that follows a dotted name through the archives' files.

It finds names as an import of the installed packages would, by AST (module, its imports and
star imports, submodules, class, base classes, method), falls back to a C extension's strings
where no source or stub has a name, finds what torch_npu registers as ``torch.<device>`` and
reads an operator's schema from the ``native_functions`` YAML the package ships.
"""

from __future__ import annotations

import ast
import builtins
import re
from typing import Literal

from ._archives import Sources, _extension_path, _has_c_string
from ._found import (
    Found,
    Missing,
    ModuleFile,
    Outside,
    Resolution,
    _call_shape,
    _collect,
    _dotted,
    _Namespace,
)


class Resolver:
    """Finds names in the archives' files, as an import of the installed packages would."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self._modules: dict[str, ModuleFile | None] = {}
        self._namespaces: dict[str, _Namespace] = {}
        self._registrations: dict[str, tuple[str, str] | None] = {}

    # modules

    def module(self, name: str) -> ModuleFile | None:
        """The file of module ``name`` (source, else stub, else C extension), if any."""
        if name not in self._modules:
            self._modules[name] = self._find_module(name)
        return self._modules[name]

    def _find_module(self, name: str) -> ModuleFile | None:
        base = name.replace(".", "/")
        candidates: tuple[tuple[str, Literal["python", "stub"]], ...] = (
            (f"{base}.py", "python"),
            (f"{base}/__init__.py", "python"),
            (f"{base}.pyi", "stub"),
            (f"{base}/__init__.pyi", "stub"),
        )
        for path, kind in candidates:
            if self.sources.has(path):
                return ModuleFile(name, path, kind)
        extension = _extension_path(self.sources, base)
        return None if extension is None else ModuleFile(name, extension, "extension")

    def _namespace(self, module: ModuleFile) -> _Namespace:
        ns = self._namespaces.get(module.path)
        if ns is None:
            ns = self._namespaces[module.path] = _Namespace()
            _collect(self.sources.tree(module.path).body, ns, module, fallback=False)
        return ns

    def resolve(self, dotted: str) -> Resolution:
        """Follow ``a.b.c`` from the top-level module, attribute by attribute."""
        top, *attrs = dotted.split(".")
        module = self.module(top)
        if module is None:
            return Missing((f"no module {top} in the archives",))
        current: Resolution = self._module_found(module)
        for attr in attrs:
            if not isinstance(current, Found):
                break
            current = self.attribute(current, attr)
        return current

    def _module_found(self, module: ModuleFile) -> Found:
        if module.kind == "extension":
            origin = f"{module.name} is the C extension {module.path}, with no .pyi stub"
            return Found("binary", origin, module, top=module.name.split(".")[0], origin=origin)
        return Found("module", module.path, module)

    def attribute(self, found: Found, name: str) -> Resolution:
        """The attribute ``name`` of something found."""
        if found.kind == "module" and found.module is not None:
            return self._module_attr(found.module, name, set())
        if found.kind == "binary":
            return self._binary_name(found.top, name, found.origin, found.strings)
        if found.kind == "class":
            return self._class_attr(found, name, set())
        return Outside(f"{name} is an attribute of a {found.kind} ({found.evidence}), not read")

    def _module_attr(self, module: ModuleFile, name: str, seen: set[tuple[str, str]]) -> Resolution:
        if (module.path, name) in seen:
            return Missing((f"{module.path} (import cycle)",))
        seen = seen | {(module.path, name)}
        ns = self._namespace(module)
        bindings = ns.bindings.get(name, [])
        if bindings:
            primary = [b for b in bindings if not b[1]] or bindings
            return self._binding(module, primary[-1][0], name, seen)
        looked = [module.path]
        for star in ns.stars:
            target = self.module(star)
            if target is None or target.kind == "extension":
                continue
            exports = self._namespace(target).exports
            if exports is not None and name not in exports:
                looked.append(f"{target.path} (star import: its __all__ leaves {name} out)")
                continue
            if exports is None and name.startswith("_"):
                looked.append(f"{target.path} (star import: no private names)")
                continue
            found = self._module_attr(target, name, seen)
            if isinstance(found, Found):
                return found
            if isinstance(found, Missing):
                looked += found.looked
        if module.package:
            sub = self.module(f"{module.name}.{name}")
            if sub is not None:
                return self._module_found(sub)
        if ns.getattr_strings is not None and name in ns.getattr_strings:
            return Found("value", f"{module.path}: its module __getattr__ answers {name!r}", module)
        if module.kind == "stub" and module.path.endswith(".pyi"):
            # A stub may leave names out: the extension beside it is the next evidence.
            ext = self._find_extension_beside(module)
            if ext is not None:
                origin = f"{module.path} leaves it out; {ext.path} is the C extension"
                return self._binary_name(ext.name.split(".")[0], name, origin)
        return Missing(tuple(dict.fromkeys(looked)))

    def _find_extension_beside(self, stub: ModuleFile) -> ModuleFile | None:
        base = stub.path.removesuffix("/__init__.pyi").removesuffix(".pyi")
        extension = _extension_path(self.sources, base)
        return None if extension is None else ModuleFile(stub.name, extension, "extension")

    def _binding(
        self, module: ModuleFile, node: ast.AST, name: str, seen: set[tuple[str, str]]
    ) -> Resolution:
        where = f"{module.path}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ClassDef):
            return Found("class", f"{where} class {node.name}", module, node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return Found("function", f"{where} def {node.name}", module, node)
        if isinstance(node, ast.alias):  # import a.b [as c]
            target = node.name if node.asname else node.name.split(".")[0]
            found_module = self.module(target)
            if found_module is None:
                why = f"{module.path} binds {name} to module {target}, outside the archives"
                return Outside(why, target)
            return self._module_found(found_module)
        if isinstance(node, ast.ImportFrom):
            source, attr = node.module or "", node.names[0].name
            target_module = self.module(source)
            if target_module is None:
                why = f"{module.path} imports {name} from {source}, outside the archives checked"
                return Outside(why, f"{source}.{attr}")
            if target_module.kind == "extension":
                origin = f"{module.path} imports it from the C extension {target_module.path}"
                return self._binary_name(source.split(".")[0], attr, origin)
            found = self._module_attr(target_module, attr, seen)
            if isinstance(found, Missing) and target_module.package:
                sub = self.module(f"{source}.{attr}")
                if sub is not None:
                    return self._module_found(sub)
            return found
        value = getattr(node, "value", None)
        if isinstance(value, ast.Name | ast.Attribute):
            aliased = self._expression(module, value, seen)
            if isinstance(aliased, Found):
                return aliased
        return Found("value", f"{where} assigned", module)

    def _expression(
        self, module: ModuleFile, expr: ast.expr, seen: set[tuple[str, str]]
    ) -> Resolution:
        """What a name or attribute expression in ``module``'s namespace stands for."""
        if isinstance(expr, ast.Name):
            found = self._module_attr(module, expr.id, seen)
            if isinstance(found, Missing) and hasattr(builtins, expr.id):
                return Outside(f"builtins.{expr.id}", f"builtins.{expr.id}")
            return found
        if isinstance(expr, ast.Attribute):
            base = self._expression(module, expr.value, seen)
            if isinstance(base, Outside):
                return Outside(base.why, f"{base.name}.{expr.attr}" if base.name else "")
            if isinstance(base, Missing):
                return base
            return self.attribute(base, expr.attr)
        return Outside(f"{ast.unparse(expr)} (an expression)")

    def _class_attr(self, cls: Found, name: str, seen: set[tuple[str, str]]) -> Resolution:
        node, module = cls.node, cls.module
        assert isinstance(node, ast.ClassDef)
        assert module is not None
        key = (f"{module.path}:{node.name}", name)
        if key in seen:
            return Missing((f"{module.path} class {node.name} (cycle)",))
        seen = seen | {key}
        for stmt in node.body:
            where = f"{module.path}:{stmt.lineno}"
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
                return Found("function", f"{where} {node.name}.{name}", module, stmt, method=True)
            if isinstance(stmt, ast.ClassDef) and stmt.name == name:
                return Found("class", f"{where} class {node.name}.{name}", module, stmt)
            targets: list[ast.expr] = []
            if isinstance(stmt, ast.Assign):
                targets = stmt.targets
            elif isinstance(stmt, ast.AnnAssign):
                targets = [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return Found("value", f"{where} {node.name}.{name} assigned", module)
        looked = [f"{module.path} class {node.name}"]
        outside: list[str] = []
        for base_expr in node.bases:
            base = self._expression(module, base_expr, set())
            if isinstance(base, Outside):
                if base.name != "builtins.object":
                    outside.append(base.name or base.why)
                continue
            if isinstance(base, Missing):
                outside.append(f"{ast.unparse(base_expr)} (not found)")
                continue
            if base.kind == "class":
                found = self._class_attr(base, name, seen)
            elif base.kind == "binary":
                origin = f"{node.name} has the C base {ast.unparse(base_expr)}"
                found = self._binary_name(base.top, name, origin)
            else:
                continue
            if isinstance(found, Found):
                return found
            if isinstance(found, Outside):
                outside.append(found.name or found.why)
            else:
                looked += found.looked
        if outside:
            return Outside(
                f"{node.name} ({module.path}) does not define {name}; it may inherit it from "
                f"{', '.join(dict.fromkeys(outside))}, outside the archives checked"
            )
        return Missing(tuple(dict.fromkeys(looked)))

    # C extensions

    def binaries(self, top: str) -> list[str]:
        """The shared libraries a package ships: those at its top (extension modules) first."""
        found = [
            p
            for p in self.sources.paths()
            if p.startswith((f"{top}/", f"{top}.libs/")) and re.search(r"\.(so|pyd)(\.\d+)*$", p)
        ]
        return sorted(found, key=lambda p: (p.count("/") > 1, p))

    def _binary_name(
        self, top: str, name: str, origin: str, strings: tuple[str, ...] = ()
    ) -> Resolution:
        binaries = self.binaries(top)
        for path in binaries:
            if _has_c_string(self.sources.read(path), name.encode()):
                names = (*strings, name)
                quoted = ", ".join(repr(n) for n in names)
                evidence = f"{'strings' if len(names) > 1 else 'string'} {quoted} in {path}"
                return Found(
                    "binary", f"{evidence} ({origin})", top=top, strings=names, origin=origin
                )
        if not binaries:
            return Missing((f"{top} ships no shared library ({origin})",))
        shown = ", ".join(binaries[:2]) + (f" and {len(binaries) - 2} more" if binaries[2:] else "")
        return Missing((f"the strings of {shown} ({origin})",))

    def call_sites(self, top: str, name: str) -> list[tuple[str, int, tuple[str, ...]]]:
        """Calls of ``<anything>.name(...)`` in a package's own Python sources."""
        sites: list[tuple[str, int, tuple[str, ...]]] = []
        needle = name.encode()
        for path in self.sources.paths():
            if not (path.startswith(f"{top}/") and path.endswith(".py")):
                continue
            if needle not in self.sources.read(path):
                continue
            for node in ast.walk(self.sources.tree(path)):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == name
                ):
                    shape = _call_shape(node)
                    if shape is not None:
                        sites.append((f"{path}:{node.lineno}", *shape))
        return sites

    # torch.<device> and operators

    def device_module(self, device: str) -> tuple[str, str] | None:
        """What torch_npu registers as ``torch.<device>``: ``(module, where)``, or None."""
        if device in self._registrations:
            return self._registrations[device]
        result: tuple[str, str] | None = None
        for path in sorted(self.sources.paths()):
            if not path.endswith(".py") or b"_register_device_module" not in self.sources.read(
                path
            ):
                continue
            for node in ast.walk(self.sources.tree(path)):
                if not (isinstance(node, ast.Call) and len(node.args) == 2):
                    continue
                func = _dotted(node.func) or ""
                first, second = node.args
                if (
                    func.rsplit(".", 1)[-1] == "_register_device_module"
                    and isinstance(first, ast.Constant)
                    and first.value == device
                ):
                    target = _dotted(second)
                    if target is not None:
                        result = (target, f"{path}:{node.lineno}")
                        break
            if result is not None:
                break
        self._registrations[device] = result
        return result

    def operator(self, top: str, op: str) -> Resolution:
        """An operator's schema from the ``native_functions`` YAML the package ships."""
        name = op.split("::", 1)[-1]
        pattern = re.compile(
            rf"^\s*-?\s*func:\s*{re.escape(name)}(?:\.\w+)?\((.*)\)\s*->", re.MULTILINE
        )
        looked = []
        for path in sorted(self.sources.paths()):
            if not (path.startswith(f"{top}/") and path.endswith(".yaml")):
                continue
            looked.append(path)
            match = pattern.search(self.sources.read(path).decode(errors="replace"))
            if match is not None:
                line = self.sources.read(path)[: match.start(1)].count(b"\n") + 1
                return Found(
                    "op",
                    f"operator schema {name}({match.group(1)}) at {path}:{line}",
                    schema=_schema_signature(match.group(1)),
                )
        binary = self._binary_name(top, op, "the operator's name; no schema YAML ships")
        if isinstance(binary, Found):
            return Found("op", binary.evidence, top=top)
        return Missing((*looked, *(binary.looked if isinstance(binary, Missing) else ())))


def _schema_signature(arguments: str) -> str:
    """``Tensor self, *, int? x=None`` as a Python signature, ``(self, *, x=None)``."""
    pieces: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(arguments):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append(arguments[start:i])
            start = i + 1
    pieces.append(arguments[start:])
    params: list[str] = []
    for piece in (p.strip() for p in pieces):
        if piece == "*":
            params.append("*")
        elif piece:
            declaration, _, default = piece.partition("=")
            name = declaration.split()[-1]
            params.append(f"{name}=None" if default else name)
    return f"({', '.join(params)})"
