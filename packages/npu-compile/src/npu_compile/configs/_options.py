"""Validated option trees: the machinery behind :class:`CompilerConfig`.

An option group is a class whose options are :class:`_Option` descriptors and whose sub-groups are
:class:`_Group` descriptors. Assignment validates (unknown name, wrong type, value out of range all
raise at the line that is wrong, not at compile time) and groups compare and hash by value, so a
config can key a cache.

An option's declaration is its one source: its ``torch.compile`` key (``NPUGRAPH_EX_OPTIONS`` is
built from the keys), whether it has an effect here (the no-effect warnings read it), a value
TorchAir accepts (the compatibility tests use it) and its README notes (``_tables`` writes the
README's option tables from the declarations).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any, ClassVar, Generic, TypeVar, overload

from npu_compile.configs._validators import Validator
from npu_compile.configs._views import unview, view
from npu_compile.errors import ConfigError, UnknownOptionError

T = TypeVar("T")
G = TypeVar("G", bound="_Node")


#: What an option's ``example`` may hold instead of a value, where TorchAir's check needs a real
#: file or a function: the compatibility tests put one in its place.
EXAMPLE_STAND_INS = {
    "<dir>": "an existing directory",
    "<file>": "an existing file",
    "<json>": "an existing .json file",
    "<fn>": "a function",
}

_NO_EXAMPLE: Any = object()


class _Option(Generic[T]):
    """One leaf option, declared once: everything the package says about it is here.

    Args:
        default: TorchAir's default (``mode`` excepted).
        validate: Checks and normalises an assigned value (``_validators``).
        help: A few words naming what it does.
        effect: ``None`` for an option npu-compile implements; otherwise why it has no effect
            here: the backend warns once with that text when it is set to something other than
            its default, and the README says so (``_effects`` holds the reasons many share).
        key: Its ``torch.compile(options={...})`` key, if it has one (``NPUGRAPH_EX_OPTIONS``).
        inverted: The key means the opposite of the option (``inplace_pass=False`` sets
            ``disable_reinplace_inplaceable_ops_pass = True``); boolean options only.
        example: A value TorchAir accepts, other than the default where there is one, for the
            compatibility tests; a string of ``EXAMPLE_STAND_INS`` stands for a file or a
            function. A boolean option's example is ``not default`` unless given.
        note: The notes cell of its README row (Markdown, one line). A no-effect option without
            one gets the README wording of its ``effect``.
    """

    def __init__(
        self,
        default: T,
        validate: Validator[T],
        help: str,
        effect: str | None = None,
        *,
        key: str | None = None,
        inverted: bool = False,
        example: object = _NO_EXAMPLE,
        note: str = "",
    ) -> None:
        if example is _NO_EXAMPLE:
            if not isinstance(default, bool):
                raise TypeError(f"option {help!r}: give example=, a value TorchAir accepts")
            example = not default
        if inverted and (key is None or not isinstance(default, bool)):
            raise TypeError(f"option {help!r}: only a boolean option with a key is inverted")
        self.default = default
        self.validate = validate
        self.help = help
        self.effect = effect
        self.key = key
        self.inverted = inverted
        self.example = example
        self.note = note
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Option[T]: ...
    @overload
    def __get__(self, obj: _Node, owner: type) -> T: ...
    def __get__(self, obj: _Node | None, owner: type) -> T | _Option[T]:
        if obj is None:
            return self
        value: T = view(obj.__dict__[self.name], obj, self.name)
        return value

    def __set__(self, obj: _Node, value: T) -> None:
        obj.__dict__[self.name] = self.validate(obj._path_of(self.name), unview(value))


class _Group(Generic[G]):
    """A sub-group of options; the attribute itself cannot be reassigned."""

    def __init__(self, cls: type[G]) -> None:
        self.cls = cls
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Group[G]: ...
    @overload
    def __get__(self, obj: _Node, owner: type) -> G: ...
    def __get__(self, obj: _Node | None, owner: type) -> G | _Group[G]:
        if obj is None:
            return self
        group: G = obj.__dict__[self.name]
        return group

    def __set__(self, obj: _Node, value: object) -> None:
        path = obj._path_of(self.name)
        names = ", ".join(sorted(self.cls._leaf_names()))
        raise ConfigError(
            f"{path} is a group of options, not an option: set one of its options instead "
            f"({path}.<name> with <name> in: {names})"
        )


class _Node:
    """Base of every option group. Subclasses declare `_Option` and `_Group` class attributes."""

    _prefix: ClassVar[str] = ""

    def __init__(self, prefix: str | None = None) -> None:
        object.__setattr__(self, "_prefix_", self._prefix if prefix is None else prefix)
        for name, attr in self._declared().items():
            if isinstance(attr, _Option):
                self.__dict__[name] = attr.default
            else:
                self.__dict__[name] = attr.cls(self._path_of(name))

    @classmethod
    def _declared(cls) -> dict[str, _Option[Any] | _Group[Any]]:
        found: dict[str, _Option[Any] | _Group[Any]] = {}
        for klass in reversed(cls.__mro__):
            for name, attr in vars(klass).items():
                if isinstance(attr, (_Option, _Group)):
                    found[name] = attr
        return found

    @classmethod
    def _leaf_names(cls) -> list[str]:
        return list(cls._declared())

    @classmethod
    def _option_paths(cls, prefix: str = "") -> Iterator[tuple[str, _Option[Any]]]:
        """Yield ``(dotted path, option)`` for every declared leaf option, depth first."""
        for name, attr in cls._declared().items():
            path = f"{prefix}.{name}" if prefix else name
            if isinstance(attr, _Group):
                yield from attr.cls._option_paths(path)
            else:
                yield path, attr

    def _path_of(self, name: str) -> str:
        prefix: str = self.__dict__.get("_prefix_", "")
        return f"{prefix}.{name}" if prefix else name

    def _unknown(self, name: str) -> UnknownOptionError:
        names = sorted(self._declared())
        where = self.__dict__.get("_prefix_") or type(self).__name__
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return UnknownOptionError(
            f"{where} has no option {name!r}.{hint} Valid names: {', '.join(names)}."
        )

    def __setattr__(self, name: str, value: object) -> None:
        if name in self._declared():
            object.__setattr__(self, name, value)
            return
        raise self._unknown(name)

    def __delattr__(self, name: str) -> None:
        if name in self._declared():
            path = self._path_of(name)
            raise ConfigError(
                f"{path} cannot be deleted: options always have a value; assign its default "
                f"instead (a fresh CompilerConfig().{path} holds it)"
            )
        raise self._unknown(name)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that do not exist. Dunder lookups (copy, pickle, IPython) must see
        # a plain AttributeError so their protocols keep working.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise self._unknown(name)

    def items(self) -> Iterator[tuple[str, object]]:
        """Yield ``(dotted path, value)`` for every leaf option, depth first, in declared order."""
        for name, attr in self._declared().items():
            value = self.__dict__[name]
            if isinstance(attr, _Group):
                yield from value.items()
            else:
                yield self._path_of(name), value

    def options(self) -> Iterator[tuple[str, _Option[Any], object]]:
        """Yield ``(dotted path, option, value)`` for every leaf option, depth first."""
        for name, attr in self._declared().items():
            value = self.__dict__[name]
            if isinstance(attr, _Group):
                yield from value.options()
            else:
                yield self._path_of(name), attr, value

    def as_dict(self) -> dict[str, object]:
        """Return every leaf option as ``{dotted path: value}``."""
        return dict(self.items())

    def set(self, path: str, value: object) -> None:
        """Set an option by dotted path relative to this group (validated like an assignment)."""
        node: _Node = self
        *groups, leaf = path.split(".")
        for name in groups:
            attr = node._declared().get(name)
            if not isinstance(attr, _Group):
                raise node._unknown(name)
            node = node.__dict__[name]
        setattr(node, leaf, value)

    def get(self, path: str) -> object:
        """Return an option by dotted path relative to this group (the plain value, no view)."""
        node: object = self
        for name in path.split("."):
            node = getattr(node, name)
        return unview(node)

    def _key(self) -> tuple[tuple[str, object], ...]:
        return tuple(self.items())

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Node)
        return self._key() == other._key()

    def __hash__(self) -> int:
        parts = []
        for path, value in self.items():
            try:
                hash(value)
            except TypeError:  # a dict option: equal configs must hash equal, so leave it out
                value = None
            parts.append((path, value))
        return hash((type(self).__name__, tuple(parts)))

    def _blank(self: G) -> G:
        # Subclasses may have their own __init__ signature (CompilerConfig takes none).
        blank = type(self).__new__(type(self))
        _Node.__init__(blank, self.__dict__.get("_prefix_"))
        return blank

    def __repr__(self) -> str:
        fresh = self._blank()
        defaults = dict(fresh.items())
        changed = [f"{p}={v!r}" for p, v in self.items() if defaults.get(p) != v]
        return f"{type(self).__name__}({', '.join(changed)})"

    def copy(self: G) -> G:
        """Return an independent copy (pool handles are shared, not copied)."""
        clone = self._blank()
        self._copy_into(clone)
        return clone

    def _copy_into(self, clone: _Node) -> None:
        # Every value was validated when it was assigned, and validators store immutable values
        # (a dict as a copy of its own): the copy takes them as they are, so a path, a range or a
        # pool is not checked again each time a backend snapshots its config.
        for name, attr in self._declared().items():
            value = self.__dict__[name]
            if isinstance(attr, _Group):
                value._copy_into(clone.__dict__[name])
            else:
                clone.__dict__[name] = dict(value) if type(value) is dict else value

    def __getstate__(self) -> dict[str, object]:
        # A graph pool is process-local device memory; pickling it fails deep inside torch with
        # an unrelated AttributeError, so say what to do instead.
        for path, value in self.items():
            if type(value).__name__ == "PoolHandle":
                raise TypeError(
                    f"cannot pickle a config whose {path} is set: a graph pool belongs to this "
                    f"process. Pickle the config with {path} = None and set it again after "
                    "loading (npu_mempool.graph_pool_handle(device))"
                )
        return dict(self.__dict__)

    def __copy__(self: G) -> G:
        return self.copy()

    def __deepcopy__(self: G, memo: dict[int, object]) -> G:
        return self.copy()
