"""Checking one entry: resolve it in the archives and give its verdict, a ``Result``.

``check_entry`` follows ``torch.npu`` names through torch_npu's device registration, resolves
the name (or the operator), then checks the method we override or the calls we make: against
Python parameters, an operator schema, or for a name in a binary the package's own callers.
The statuses (``ok``, ``MOVED``, ``CHANGED``, ``UNVERIFIABLE``) and which of them fail are here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Literal

from ._found import Found, Missing, Outside
from ._inventory import Entry, in_range, release_range
from ._params import _decorators, _parameter_names, _signature_text, bind_problem, parse_call
from ._resolve import Resolver

Status = Literal["ok", "MOVED", "CHANGED", "UNVERIFIABLE"]
STATUSES: tuple[Status, ...] = ("ok", "MOVED", "CHANGED", "UNVERIFIABLE")
FAILING: frozenset[Status] = frozenset({"MOVED", "CHANGED"})

# The device modules torch_npu registers on torch: the entries under ``torch.npu`` resolve through
# what the registration call names.
_DEVICE_ALIASES = {"torch.npu": "npu"}


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
