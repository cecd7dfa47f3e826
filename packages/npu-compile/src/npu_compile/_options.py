"""Validated option trees: the machinery behind :class:`CompilerConfig`.

An option group is a class whose options are :class:`_Option` descriptors and whose sub-groups are
:class:`_Group` descriptors. Assignment validates (unknown name, wrong type, value out of range all
raise at the line that is wrong, not at compile time) and groups compare and hash by value, so a
config can key a cache.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Generic, TypeVar, overload

from npu_compile.errors import ConfigError, UnknownOptionError

T = TypeVar("T")
G = TypeVar("G", bound="_Node")

# Validators receive the dotted option path (for the message) and the value; they return the
# normalised value or raise ConfigError saying what is allowed.
Validator = Callable[[str, object], T]


def _describe(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def boolean(path: str, value: object) -> bool:
    """Accept exactly ``True`` or ``False`` (``1``/``"1"`` are refused: they hide typos)."""
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{path} must be True or False, got {_describe(value)}")


def int_range(low: int, high: int) -> Validator[int]:
    """An integer in ``[low, high]`` (bools are refused)."""

    def validate(path: str, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return value
        raise ConfigError(f"{path} must be an int in [{low}, {high}], got {_describe(value)}")

    return validate


def choice(*allowed: str, hints: dict[str, str] | None = None) -> Validator[str]:
    """One of ``allowed``; ``hints`` maps a known but unsupported value to an explanation."""

    def validate(path: str, value: object) -> str:
        if isinstance(value, str) and value in allowed:
            return value
        if isinstance(value, str) and hints and value in hints:
            raise ConfigError(f"{path} = {value!r} is not supported: {hints[value]}")
        names = ", ".join(repr(a) for a in allowed)
        raise ConfigError(f"{path} must be one of {names}, got {_describe(value)}")

    return validate


def optional_path(path: str, value: object) -> str | None:
    """``None`` or a non-empty path (``str`` or ``os.PathLike``), stored as ``str``.

    Checked when assigned: a NUL byte (which no file system accepts) is refused here rather than
    at the first compile, where it would only surface as a fallback.
    """
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str) and "\0" in text:
            raise ConfigError(
                f"{path} {text!r} contains a NUL byte, which no file system accepts; pass a "
                "valid directory path"
            )
        if isinstance(text, str) and text:
            return text
    raise ConfigError(f"{path} must be None or a non-empty directory path, got {_describe(value)}")


def pool_handle(path: str, value: object) -> object:
    """``None``, an ``npu_mempool.PoolHandle``, or a device pool id tuple.

    The tuple is what ``torch.npu.graph_pool_handle()`` / ``torch.cuda.graph_pool_handle()``
    return (two ints); the backend turns it into a pool on the device the graph runs on, the same
    pool for every graph that names the same tuple.
    """
    from npu_mempool import PoolHandle

    if value is None or isinstance(value, PoolHandle):
        return value
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return value
    raise ConfigError(
        f"{path} must be None, a pool from npu_compile.graph_pool_handle(device), or the tuple "
        f"torch.npu.graph_pool_handle() / torch.cuda.graph_pool_handle() returns, got "
        f"{_describe(value)}"
    )


def callable_or_none(path: str, value: object) -> object:
    """``None`` or a callable (a graph pass ``fn(gm, example_inputs, config)``)."""
    if value is None or callable(value):
        return value
    raise ConfigError(
        f"{path} must be None or a callable fn(gm, example_inputs, config), got {_describe(value)}"
    )


def optional_choice(*allowed: str) -> Validator[str | None]:
    """``None`` or one of ``allowed``."""

    def validate(path: str, value: object) -> str | None:
        if value is None or (isinstance(value, str) and value in allowed):
            return value
        names = ", ".join(repr(a) for a in allowed)
        raise ConfigError(f"{path} must be None or one of {names}, got {_describe(value)}")

    return validate


def optional_bool(path: str, value: object) -> bool | None:
    """``None`` (leave the choice to the runtime), ``True`` or ``False``."""
    if value is None or isinstance(value, bool):
        return value
    raise ConfigError(f"{path} must be None, True or False, got {_describe(value)}")


def optional_int_range(low: int, high: int) -> Validator[int | None]:
    """``None`` or an integer in ``[low, high]``."""
    checked = int_range(low, high)

    def validate(path: str, value: object) -> int | None:
        if value is None:
            return None
        try:
            return checked(path, value)
        except ConfigError:
            raise ConfigError(
                f"{path} must be None or an int in [{low}, {high}], got {_describe(value)}"
            ) from None

    return validate


def int_list_or_none(path: str, value: object) -> tuple[int, ...] | None:
    """``None`` or a list/tuple of ints, stored as a tuple (configs hash by value)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return tuple(value)
    raise ConfigError(f"{path} must be None or a list of ints, got {_describe(value)}")


def op_names(path: str, value: object) -> tuple[str, ...]:
    """A list of operator names ``"namespace::name"`` (``"aten::softmax"``), stored as a tuple."""
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, str) and "::" in v and v.split("::", 1)[1] for v in value
    ):
        return tuple(value)
    raise ConfigError(
        f"{path} must be a list of operator names such as 'aten::softmax' or "
        f"'vllm::unified_attention', got {_describe(value)}"
    )


def sizes_or_none(path: str, value: object) -> tuple[int, ...] | None:
    """``None`` or positive ints, stored sorted and without repeats."""
    if value is None:
        return None
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return tuple(sorted(set(value)))
    raise ConfigError(
        f"{path} must be None or a non-empty list of positive ints (the batch sizes to capture), "
        f"got {_describe(value)}"
    )


def dict_or_none(path: str, value: object) -> object:
    """``None`` or a ``dict`` (stored as a copy)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return dict(value)
    raise ConfigError(f"{path} must be None or a dict, got {_describe(value)}")


def str_or_none(path: str, value: object) -> str | None:
    """``None`` or a string."""
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{path} must be None or a str, got {_describe(value)}")


def any_value(path: str, value: object) -> object:
    """Anything (TorchAir keeps these as plain attributes)."""
    return value


def existing_dir(path: str, value: object) -> str:
    """A path (``str`` or ``os.PathLike``) naming a directory that exists."""
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str) and text and "\0" not in text and os.path.isdir(text):
            return text
    raise ConfigError(
        f"{path} must name an existing directory, got {_describe(value)}; create it first"
    )


def existing_file_or_none(suffix: str = "") -> Validator[str | None]:
    """``None`` or a path naming an existing file (ending with ``suffix`` when given)."""

    def validate(path: str, value: object) -> str | None:
        if value is None:
            return None
        if isinstance(value, (str, os.PathLike)):
            text = os.fspath(value)
            if (
                isinstance(text, str)
                and text
                and "\0" not in text
                and text.endswith(suffix)
                and os.path.isfile(text)
            ):
                return text
        kind = f"an existing {suffix} file" if suffix else "an existing file"
        raise ConfigError(f"{path} must be None or {kind}, got {_describe(value)}")

    return validate


def real_path(path: str, value: object) -> str | None:
    """``None`` or a path, stored resolved (``os.path.realpath``) as TorchAir does."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str) and text and "\0" not in text:
            return os.path.realpath(text)
    raise ConfigError(f"{path} must be None or a non-empty path, got {_describe(value)}")


def matches(pattern: str, example: str) -> Validator[str]:
    """A string matching the regular expression ``pattern``."""
    import re

    compiled = re.compile(pattern)

    def validate(path: str, value: object) -> str:
        if isinstance(value, str) and compiled.match(value):
            return value
        raise ConfigError(
            f"{path} must be a string like {example!r} (pattern {pattern}), got {_describe(value)}"
        )

    return validate


class _BoolView(int):
    """A boolean option as read from a config: a ``True``/``False`` with TorchAir's ``.value``.

    TorchAir's options are objects whose ``.value`` is ``"1"``/``"0"`` for booleans and which can
    be set through ``.value``; scripts read ``config.debug.run_eagerly.value == "0"``. ``bool``
    cannot be subclassed, so this is an ``int`` (0 or 1) that compares, hashes, prints and acts like
    the ``bool`` it stands for.
    """

    _owner: _Node
    _name: str

    def __new__(cls, flag: bool, owner: _Node, name: str) -> _BoolView:
        view = super().__new__(cls, bool(flag))
        view._owner, view._name = owner, name
        return view

    def __repr__(self) -> str:
        return repr(bool(self))

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(bool(self), spec)

    @property
    def value(self) -> str:
        """TorchAir's string form: ``"1"`` or ``"0"``; assigning sets the option."""
        return "1" if self else "0"

    @value.setter
    def value(self, new: object) -> None:
        setattr(self._owner, self._name, new)


class _IntView(int):
    """An integer option as read from a config, with TorchAir's ``.value`` (its decimal string)."""

    _owner: _Node
    _name: str

    def __new__(cls, number: int, owner: _Node, name: str) -> _IntView:
        view = super().__new__(cls, number)
        view._owner, view._name = owner, name
        return view

    @property
    def value(self) -> str:
        """TorchAir's string form (``"64"``); assigning sets the option."""
        return str(int(self))

    @value.setter
    def value(self, new: object) -> None:
        setattr(self._owner, self._name, new)


class _StrView(str):
    """A string option as read from a config, with TorchAir's ``.value`` (the string itself)."""

    _owner: _Node
    _name: str

    def __new__(cls, text: str, owner: _Node, name: str) -> _StrView:
        view = super().__new__(cls, text)
        view._owner, view._name = owner, name
        return view

    @property
    def value(self) -> str:
        """The string (``config.mode.value``); assigning sets the option."""
        return str(self)

    @value.setter
    def value(self, new: object) -> None:
        setattr(self._owner, self._name, new)


def _view(value: Any, owner: _Node, name: str) -> Any:
    # Exact types only: an option that holds another object (a pool, a callable) is returned as is.
    if type(value) is bool:
        return _BoolView(value, owner, name)
    if type(value) is int:
        return _IntView(value, owner, name)
    if type(value) is str:
        return _StrView(value, owner, name)
    return value


def _unview(value: object) -> object:
    """The plain value behind a view (so ``a.x = b.x`` and ``.value`` round trips validate)."""
    if isinstance(value, _BoolView):
        return bool(value)
    if isinstance(value, _IntView):
        return int(value)
    if isinstance(value, _StrView):
        return str(value)
    return value


class _Option(Generic[T]):
    """One leaf option: a default, a validator, a one-line help text and its effect here.

    ``effect`` is ``None`` for an option npu-compile implements; otherwise it says why the option
    has no effect here, and the backend warns once with that text when the option is set to
    something other than its default.
    """

    def __init__(
        self, default: T, validate: Validator[T], help: str, effect: str | None = None
    ) -> None:
        self.default = default
        self.validate = validate
        self.help = help
        self.effect = effect
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
        value: T = _view(obj.__dict__[self.name], obj, self.name)
        return value

    def __set__(self, obj: _Node, value: T) -> None:
        obj.__dict__[self.name] = self.validate(obj._path_of(self.name), _unview(value))


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
        return _unview(node)

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
        prefix: str = self.__dict__.get("_prefix_", "")
        for path, value in self.items():
            relative = path[len(prefix) + 1 :] if prefix else path
            clone.set(relative, value)
        return clone

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
