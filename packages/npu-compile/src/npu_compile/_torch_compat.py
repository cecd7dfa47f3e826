"""Shims for what differs between the torch releases the package supports.

Each is a capability check, never a version comparison (docs/torch-compat.md):

* :func:`no_new_guards` refuses a guard on a symbolic size inside a pass, with
  ``ShapeEnv.error_on_new_guards`` where torch has it and by intercepting the ShapeEnv's
  ``_check_frozen`` step elsewhere;
* :func:`options_in_cache_key` adds the backend's options to the key of AOT autograd's cache,
  which torch's AOT compile uses.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

__all__ = ["NewGuardError", "no_new_guards", "options_in_cache_key"]


class NewGuardError(Exception):
    """A pass asked a question about a symbolic size whose answer holds only for some values."""


class _QuietThread(logging.Filter):
    """Drops the warnings of one thread (another thread compiling meanwhile keeps its own)."""

    def __init__(self, thread: int) -> None:
        super().__init__()
        self.thread = thread

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread or record.levelno > logging.WARNING


@contextlib.contextmanager
def no_new_guards(shape_env: Any) -> Iterator[None]:
    """Within the block, a guard on a symbolic size raises :class:`NewGuardError`.

    A pass decides on the sizes of the example inputs; a decision that holds for some values of a
    symbolic size only (``numel(a) == numel(b)`` when both hints happen to be equal) would add a
    guard that specialises the graph: Dynamo then recompiles for other sizes, and a caller that
    drops guards (vLLM) runs a graph that is wrong for them. The caller skips the pass instead.
    """
    if shape_env is None:
        yield
        return
    error_on_new_guards = getattr(shape_env, "error_on_new_guards", None)
    if error_on_new_guards is not None:
        from torch.fx.experimental.symbolic_shapes import _ShapeEnvGuardError

        # torch logs a warning for the refused guard before it raises; the refusal is this
        # function's purpose, and the caller logs the skipped pass (at debug level).
        shapes_log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
        quiet = _QuietThread(threading.get_ident())
        shapes_log.addFilter(quiet)
        try:
            with error_on_new_guards():
                yield
        except _ShapeEnvGuardError as error:
            raise NewGuardError(str(error)) from None
        finally:
            shapes_log.removeFilter(quiet)
        return
    # Without error_on_new_guards (torch 2.11), a frozen ShapeEnv only counts a new guard and
    # still records it. Every new guard or runtime assert first passes through `_check_frozen`:
    # raising there, on this ShapeEnv only, records nothing, and an evaluation that raised is not
    # cached (a cached answer would let the next pass skip the question). This is what
    # error_on_new_guards does inside torch.
    if not callable(getattr(shape_env, "_check_frozen", None)):
        raise NewGuardError("this torch cannot refuse a guard on a symbolic size")

    def refuse(expr: object, concrete_val: object) -> None:
        raise NewGuardError(f"the pass needs the guard {expr} == {concrete_val}")

    shape_env._check_frozen = refuse
    try:
        yield
    finally:
        del shape_env._check_frozen


def _options_digest(
    options: str, decompositions: Mapping[Any, Callable[..., Any]], capture: bool
) -> str:
    def name(value: object) -> str:
        # Functions by name: their repr holds an address, which differs in every process.
        qualname = getattr(value, "__qualname__", None)
        return f"{getattr(value, '__module__', '')}.{qualname}" if qualname else repr(value)

    decomposed = sorted((str(op), name(fn)) for op, fn in decompositions.items())
    text = repr((options, decomposed, capture))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@contextlib.contextmanager
def options_in_cache_key(
    options: str, decompositions: Mapping[Any, Callable[..., Any]], capture: bool
) -> Iterator[None]:
    """Within the block, AOT autograd's cache keys also hold the backend's options.

    ``options`` is the digest of the backend's options (``Settings.options_digest``).

    While torch's AOT compile bundles a result, AOT autograd looks the graph up in its on-disk
    cache by the graph, its inputs and torch's own options, not by the backend's: another process
    compiling the same model with other npu-compile options (``debug.run_eagerly``, static
    kernels, a backend made with ``capture=False``) would get this one's result. torch 2.13
    happens to put a per-process name into that key; torch 2.11 does not, and the wrong result
    was loaded. ``torch.compiler.config.cache_key_tag`` is part of the key on every torch that
    has it: the options' digest and the capture flag join the user's tag there.
    """
    compiler_config = getattr(torch.compiler, "config", None)
    if getattr(compiler_config, "cache_key_tag", None) is None:
        yield
        return
    assert compiler_config is not None
    user_tag = compiler_config.cache_key_tag
    ours = f"npu_compile={_options_digest(options, decompositions, capture)}"
    with compiler_config.patch(cache_key_tag=f"{user_tag};{ours}" if user_tag else ours):
        yield
