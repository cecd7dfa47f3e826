"""Check the torch_npu, ``torch.npu`` and vllm-ascend names our NPU code uses against real releases.

``npu_contracts.toml`` (next to this script) lists every such name: the calls our code makes with
it or the method our vLLM platform overrides, which module uses it and what for. This script
resolves each entry in the wheels (or sdists) given on the command line by reading their files,
never importing or installing them: installing torch_npu on a machine without CANN breaks
``import torch``. A Python name is followed by AST (module, its imports and star imports,
submodules, class, base classes, method) and each call we make is bound to the parameters found;
a name in a C extension (``torch_npu._C._npu_...``) is looked up in the ``.pyi`` stub the wheel
ships or else among the strings of its shared libraries, with the wheel's own Python callers as
evidence for the arguments. ``torch.npu`` is whatever module torch_npu registers as torch's
``npu`` device module (``torch._register_device_module("npu", ...)``).

One line per entry: ``ok``, ``MOVED`` (not found; where it looked), ``CHANGED`` (found, but a call
we make no longer binds, or an overridden method's signature differs from ours) or
``UNVERIFIABLE`` (why). The exit status is 1 when any entry is MOVED or CHANGED. ``nox -s
npu_contracts`` downloads the pinned releases and runs it; by hand::

    python .ci/check_npu_contracts.py torch_npu-2.14.0-*.whl vllm_ascend-0.23.0-*.whl
"""

from __future__ import annotations

import argparse
import ast
import builtins
import re
import tarfile
import tomllib
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

INVENTORY = Path(__file__).resolve().with_name("npu_contracts.toml")

Status = Literal["ok", "MOVED", "CHANGED", "UNVERIFIABLE"]
STATUSES: tuple[Status, ...] = ("ok", "MOVED", "CHANGED", "UNVERIFIABLE")
FAILING: frozenset[Status] = frozenset({"MOVED", "CHANGED"})

# The device modules torch_npu registers on torch: the entries under ``torch.npu`` resolve through
# what the registration call names.
_DEVICE_ALIASES = {"torch.npu": "npu"}


# --- the inventory


@dataclass(frozen=True)
class Entry:
    """One name our NPU code uses, as ``npu_contracts.toml`` lists it."""

    #: The qualified name as our code reaches it (``torch_npu.npu.Stream``, ``torch.npu.foo``).
    name: str
    #: Our modules that use it (``npu_mempool._devices.npu``).
    users: tuple[str, ...]
    #: What for, so that whoever finds it moved knows what breaks.
    use: str
    #: Each distinct call we make, written as in our code: ``"(device, priority=priority)"``.
    calls: tuple[str, ...] = ()
    #: For a method our subclass overrides: our parameters, ``"(cls)"``.
    override: str = ""
    #: The decorator of our override (``classmethod``), which the base method must have too.
    decorator: str = ""
    #: ``namespace::name`` of the operator behind a name torch_npu exports from ``torch.ops``.
    op: str = ""
    #: Non-empty where the code probes for the name and works without it: what is lost then.
    optional: str = ""
    #: The releases that have the name, where others use another one (``torch_npu<2.13``): in
    #: a release outside the range its absence is expected.
    releases: str = ""


_ENTRY_KEYS = frozenset(Entry.__dataclass_fields__)


def load_inventory(path: Path = INVENTORY) -> list[Entry]:
    """Read the inventory; a malformed entry stops with one line naming it."""
    with path.open("rb") as f:
        raw = tomllib.load(f).get("api", [])
    entries: list[Entry] = []
    for item in raw:
        name = item.get("name", "<no name>")
        unknown = sorted(set(item) - _ENTRY_KEYS)
        if unknown:
            raise SystemExit(f"{path.name}: entry {name} has unknown keys {unknown}")
        if not item.get("users") or not item.get("use"):
            raise SystemExit(f"{path.name}: entry {name} needs `users` and `use`")
        entries.append(
            Entry(
                name=name,
                users=tuple(item["users"]),
                use=item["use"],
                calls=tuple(item.get("calls", ())),
                override=item.get("override", ""),
                decorator=item.get("decorator", ""),
                op=item.get("op", ""),
                optional=item.get("optional", ""),
                releases=item.get("releases", ""),
            )
        )
        if entries[-1].releases:
            release_range(entries[-1].releases)  # stops on a range it cannot read
    names = [entry.name for entry in entries]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise SystemExit(f"{path.name}: listed more than once: {', '.join(twice)}")
    return entries


_CLAUSE = re.compile(r"(>=|<=|==|!=|<|>)\s*(\d+(?:\.\d+)*)")


def release_range(text: str) -> tuple[str, list[tuple[str, tuple[int, ...]]]]:
    """``"torch_npu>=2.11,<2.13"`` as the distribution and its ``(operator, release)`` clauses."""
    match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(.+)", text)
    clauses = _CLAUSE.findall(match.group(2)) if match else []
    if match is None or not clauses or _CLAUSE.sub("", match.group(2)).strip(" ,"):
        raise SystemExit(f"not a release range: {text!r} (write it as torch_npu>=2.11,<2.13)")
    return _normal(match.group(1)), [(op, _release(v)) for op, v in clauses]


def in_range(version: str, text: str) -> bool:
    """Whether ``version`` (``2.12.0.post3``) is in the range ``text`` (its release part counts)."""
    release = _release(version)
    width = 4
    ours = release + (0,) * (width - len(release))
    for op, bound in release_range(text)[1]:
        other = bound + (0,) * (width - len(bound))
        if not {
            ">=": ours >= other,
            "<=": ours <= other,
            "==": ours == other,
            "!=": ours != other,
            "<": ours < other,
            ">": ours > other,
        }[op]:
            return False
    return True


def _release(version: str) -> tuple[int, ...]:
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def _normal(distribution: str) -> str:
    return re.sub(r"[-_.]+", "_", distribution).lower()


# --- the archives

# What is read from an sdist: the rest (tests, docs, C++ sources) is never looked at.
_SDIST_SUFFIXES = (".py", ".pyi", ".yaml", ".so")


class Sources:
    """The files of the given wheels and sdists, by their path in an installed tree."""

    def __init__(self, archives: Sequence[Path]) -> None:
        self.archives = list(archives)
        self._zips: dict[str, tuple[zipfile.ZipFile, str]] = {}
        self._loose: dict[str, bytes] = {}
        #: ``(distribution, version)`` of each archive, from its metadata.
        self.distributions: list[tuple[str, str]] = []
        self._trees: dict[str, ast.Module] = {}
        self._bytes: dict[str, bytes] = {}
        for archive in self.archives:
            if archive.suffix == ".whl" or archive.suffix == ".zip":
                self._add_wheel(archive)
            elif archive.name.endswith((".tar.gz", ".tgz")):
                self._add_sdist(archive)
            else:
                raise SystemExit(f"{archive}: not a wheel (.whl) or an sdist (.tar.gz)")

    def _add_wheel(self, archive: Path) -> None:
        zf = zipfile.ZipFile(archive)
        for info in zf.infolist():
            if info.is_dir():
                continue
            self._zips.setdefault(info.filename, (zf, info.filename))
            if info.filename.endswith(".dist-info/METADATA"):
                self.distributions.append(_name_version(zf.read(info).decode(errors="replace")))

    def _add_sdist(self, archive: Path) -> None:
        with tarfile.open(archive, "r:gz") as tf:
            for member in tf.getmembers():
                # Every sdist member sits under `<name>-<version>/`.
                path = member.name.partition("/")[2]
                if not member.isfile():
                    continue
                data_file = tf.extractfile(member)
                if data_file is None:
                    continue
                if path == "PKG-INFO":
                    text = data_file.read().decode(errors="replace")
                    self.distributions.append(_name_version(text))
                    continue
                if not path.endswith(_SDIST_SUFFIXES):
                    continue
                data = data_file.read()
                # A src/ layout installs without its src/ prefix.
                for installed in (path, path.removeprefix("src/")):
                    self._loose.setdefault(installed, data)

    def close(self) -> None:
        """Close the wheels."""
        for zf in {id(zf): zf for zf, _ in self._zips.values()}.values():
            zf.close()

    def version(self, distribution: str) -> str | None:
        """The version of ``distribution`` among the archives, if one of them is it."""
        wanted = _normal(distribution)
        return next((v for name, v in self.distributions if _normal(name) == wanted), None)

    def has(self, path: str) -> bool:
        """Whether the archives hold ``path``."""
        return path in self._zips or path in self._loose

    def paths(self) -> Iterator[str]:
        """Every file path the archives hold."""
        yield from self._zips
        yield from (path for path in self._loose if path not in self._zips)

    def has_package(self, top: str) -> bool:
        """Whether some archive installs the top-level module or package ``top``."""
        prefix = f"{top}/"
        return any(path.startswith(prefix) or path == f"{top}.py" for path in self.paths())

    def read(self, path: str) -> bytes:
        """The bytes of one file (binaries and sources are cached: several names read them)."""
        cached = self._bytes.get(path)
        if cached is not None:
            return cached
        if path in self._zips:
            zf, member = self._zips[path]
            data = zf.read(member)
        else:
            data = self._loose[path]
        self._bytes[path] = data
        return data

    def tree(self, path: str) -> ast.Module:
        """The parsed module of one Python source or stub file."""
        tree = self._trees.get(path)
        if tree is None:
            tree = self._trees[path] = ast.parse(self.read(path), filename=path)
        return tree


def _extension_path(sources: Sources, base: str) -> str | None:
    """The C extension file of module path ``base`` (``a/_C.cpython-311-x86_64-linux-gnu.so``)."""
    pattern = re.compile(re.escape(base) + r"(\.[^/]+)?\.(so|pyd)")
    return next((path for path in sources.paths() if pattern.fullmatch(path)), None)


def _has_c_string(data: bytes, name: bytes) -> bool:
    """Whether ``name`` is a C string in ``data``: NUL-terminated, after a byte no name has.

    A method table (``PyMethodDef``) holds each Python name as such a string.
    """
    needle = name + b"\0"
    start = data.find(needle)
    while start != -1:
        before = data[start - 1] if start else 0
        if not (chr(before).isalnum() or before == ord("_")):
            return True
        start = data.find(needle, start + 1)
    return False


def _name_version(metadata: str) -> tuple[str, str]:
    fields = dict(
        line.split(": ", 1)
        for line in metadata.splitlines()
        if line.startswith(("Name: ", "Version: "))
    )
    return fields.get("Name", "?"), fields.get("Version", "?")


# --- resolving names


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


# --- parameters


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


# --- checking one entry


@dataclass(frozen=True)
class Result:
    """The verdict on one entry."""

    status: Status
    name: str
    detail: str

    def line(self) -> str:
        """The report line."""
        return f"{self.status:<13}{self.name}: {self.detail}"


def check_entry(entry: Entry, resolver: Resolver) -> Result:
    """Resolve one entry and check the calls we make or the method we override."""
    target, note = entry.name, ""
    for alias, device in _DEVICE_ALIASES.items():
        if entry.name == alias or entry.name.startswith(f"{alias}."):
            registered = resolver.device_module(device)
            if registered is None:
                return _moved(
                    entry,
                    f"no {alias} registration: no _register_device_module({device!r}, ...) call "
                    "in the Python sources of the archives",
                )
            module, where = registered
            if entry.name == alias:
                return Result("ok", entry.name, f"{alias} is {module}, registered at {where}")
            target = module + entry.name[len(alias) :]
            note = f"as {target}"
    top = target.split(".")[0]
    if not resolver.sources.has_package(top):
        return Result("UNVERIFIABLE", entry.name, f"no archive given installs {top}")
    found = resolver.operator(top, entry.op) if entry.op else resolver.resolve(target)
    if isinstance(found, Missing):
        version = (
            resolver.sources.version(release_range(entry.releases)[0]) if entry.releases else None
        )
        if version is not None and not in_range(version, entry.releases):
            return Result(
                "ok",
                entry.name,
                f"absent, as expected: only {entry.releases} has it, not {version}",
            )
        return _moved(entry, f"looked in {'; '.join(found.looked)}")
    if isinstance(found, Outside):
        return Result("UNVERIFIABLE", entry.name, found.why)
    evidence = found.evidence if not note else f"{found.evidence}; {note}"
    if entry.override:
        status, detail = _check_override(entry, found)
    else:
        status, detail = _check_calls(entry, found, resolver, target)
    return Result(status, entry.name, f"{evidence}{': ' + detail if detail else ''}")


def _moved(entry: Entry, detail: str) -> Result:
    if entry.optional:
        detail += f"; the code probes for it, and without it {entry.optional}"
    return Result("MOVED", entry.name, detail)


def _check_override(entry: Entry, found: Found) -> tuple[Status, str]:
    node = found.node
    if not (found.method and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)):
        return "CHANGED", f"a {found.kind}, not a method our subclass can override"
    if entry.decorator and entry.decorator not in _decorators(node):
        return "CHANGED", f"not a {entry.decorator}, as our override is"
    ours = ast.parse(f"def _{entry.override}: pass").body[0]
    assert isinstance(ours, ast.FunctionDef)
    theirs_names = _parameter_names(node.args, "staticmethod" not in _decorators(node))
    ours_names = _parameter_names(ours.args, entry.decorator != "staticmethod")
    if theirs_names != ours_names:
        return "CHANGED", f"now {_signature_text(node)}; our override takes {entry.override}"
    return "ok", f"{_signature_text(node)}, as our override"


def _check_calls(entry: Entry, found: Found, resolver: Resolver, target: str) -> tuple[Status, str]:
    """Whether the calls we make bind to what was found, and how that was told."""
    if not entry.calls:
        return "ok", ""
    calls = [(text, parse_call(text)) for text in entry.calls]
    ours = ", ".join(text for text, _ in calls)
    signatures: list[tuple[str, ast.arguments, bool]] = []
    node = found.node
    if found.kind == "function" and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        skip = found.method and "staticmethod" not in _decorators(node)
        signatures.append((_signature_text(node), node.args, skip))
    elif found.kind == "class":
        for special in ("__new__", "__init__"):
            ctor = resolver.attribute(found, special)
            if isinstance(ctor, Found) and isinstance(
                ctor.node, ast.FunctionDef | ast.AsyncFunctionDef
            ):
                signatures.append((_signature_text(ctor.node), ctor.node.args, True))
        if not signatures:
            return "ok", "its constructor is not in Python sources: parameters unchecked"
    elif found.kind == "op" and found.schema:
        schema = ast.parse(f"def _{found.schema}: pass").body[0]
        assert isinstance(schema, ast.FunctionDef)
        signatures.append((f"schema {found.schema}", schema.args, False))
    elif found.kind == "binary":
        return _check_binary_calls(calls, resolver, target)
    else:
        return "ok", f"a {found.kind}: parameters unchecked"
    problems = [
        f"{text} does not bind to {signature}: it {problem}"
        for signature, args, skip in signatures
        for text, shape in calls
        if (problem := bind_problem(args, skip, shape))
    ]
    if problems:
        return "CHANGED", "; ".join(problems)
    verb = "accepts" if len(signatures) == 1 else "accept"
    return "ok", f"{' and '.join(s for s, _, _ in signatures)} {verb} {ours}"


def _check_binary_calls(
    calls: list[tuple[str, tuple[int, tuple[str, ...]]]], resolver: Resolver, target: str
) -> tuple[Status, str]:
    # No signature ships in a binary: the package's own Python callers are the evidence.
    top, name = target.split(".")[0], target.rsplit(".", 1)[-1]
    sites = resolver.call_sites(top, name)
    matches = {
        text: next((where for where, *shape in sites if tuple(shape) == ours), "")
        for text, ours in calls
    }
    if all(matches.values()):
        where = ", ".join(dict.fromkeys(matches.values()))
        return "ok", f"{top}'s own code calls it as we do ({where})"
    unmatched = ", ".join(text for text, where in matches.items() if not where)
    if not sites:
        return "ok", f"no signature ships and {top} never calls it: {unmatched} unchecked"
    seen = "; ".join(
        f"{where} passes {count} positional{' and ' + ', '.join(kw) if kw else ''}"
        for where, count, kw in sites[:3]
    )
    return (
        "UNVERIFIABLE",
        f"no signature ships; {top}'s own calls differ from our {unmatched}: {seen}",
    )


# --- our sources

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


# --- command line


def run(archives: Sequence[Path], inventory: Path = INVENTORY) -> tuple[list[Result], str]:
    """Check every entry against the archives; return the results and a summary line."""
    entries = load_inventory(inventory)
    sources = Sources(archives)
    try:
        resolver = Resolver(sources)
        results = [check_entry(entry, resolver) for entry in entries]
    finally:
        sources.close()
    versions = ", ".join(f"{name} {version}" for name, version in sources.distributions)
    counts = ", ".join(f"{sum(r.status == s for r in results)} {s}" for s in STATUSES)
    summary = f"{len(results)} names checked against {versions or 'the archives'}: {counts}"
    return results, summary


def main(argv: Sequence[str] | None = None) -> int:
    """Print one line per inventory entry; 1 when any is MOVED or CHANGED."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("archives", nargs="+", type=Path, help="wheels or sdists to read")
    parser.add_argument("--inventory", type=Path, default=INVENTORY, help="the names to check")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.archives if not p.is_file()]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    results, summary = run(args.archives, args.inventory)
    for result in results:
        print(result.line())
    print(summary)
    return 1 if any(r.status in FAILING for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
