"""What reading an option returns: the plain value, with TorchAir's ``.value`` on top.

TorchAir's options are objects whose ``.value`` is a string (``"1"``/``"0"`` for booleans) and
which can be set through ``.value``. A read here returns a subclass of the value's own type that
adds that ``.value`` (get and set), so both ``if config.debug.run_eagerly:`` and TorchAir's
``config.debug.run_eagerly.value == "0"`` work.
"""

from __future__ import annotations

from typing import Any

#: The config group an option belongs to: a view only sets the option on it by name, so any
#: object will do (and this module need not know ``_options``, which builds on it).
_Node = object


class BoolView(int):
    """A boolean option as read from a config: a ``True``/``False`` with TorchAir's ``.value``.

    TorchAir's options are objects whose ``.value`` is ``"1"``/``"0"`` for booleans and which can
    be set through ``.value``; scripts read ``config.debug.run_eagerly.value == "0"``. ``bool``
    cannot be subclassed, so this is an ``int`` (0 or 1) that compares, hashes, prints and acts like
    the ``bool`` it stands for.
    """

    _owner: _Node
    _name: str

    def __new__(cls, flag: bool, owner: _Node, name: str) -> BoolView:
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


class IntView(int):
    """An integer option as read from a config, with TorchAir's ``.value`` (its decimal string)."""

    _owner: _Node
    _name: str

    def __new__(cls, number: int, owner: _Node, name: str) -> IntView:
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


class StrView(str):
    """A string option as read from a config, with TorchAir's ``.value`` (the string itself)."""

    _owner: _Node
    _name: str

    def __new__(cls, text: str, owner: _Node, name: str) -> StrView:
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


def view(value: Any, owner: _Node, name: str) -> Any:
    # Exact types only: an option that holds another object (a pool, a callable) is returned as is.
    if type(value) is bool:
        return BoolView(value, owner, name)
    if type(value) is int:
        return IntView(value, owner, name)
    if type(value) is str:
        return StrView(value, owner, name)
    return value


def unview(value: object) -> object:
    """The plain value behind a view (so ``a.x = b.x`` and ``.value`` round trips validate)."""
    if isinstance(value, BoolView):
        return bool(value)
    if isinstance(value, IntView):
        return int(value)
    if isinstance(value, StrView):
        return str(value)
    return value
