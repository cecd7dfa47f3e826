"""What the backend checks of a config before compiling: mode, options without effect, pools.

* ``mode="max-autotune"`` (TorchAir's Graph Engine mode) is accepted by the config and refused
  here, with what to use instead;
* an option that has no meaning off Ascend, set to something other than its default, warns once
  per backend (:class:`~npu_compile.errors.NoEffectWarning`) naming why;
* a pool id tuple from ``torch.npu.graph_pool_handle()`` / ``torch.cuda.graph_pool_handle()`` in
  ``aclgraph_config.use_custom_pool`` becomes an ``npu_mempool.PoolHandle`` on the graph's
  device, the same one for every graph that names the same tuple.

It also holds the shims for what differs between the torch releases the package supports
(each a capability check, never a version comparison; docs/torch-compat.md):

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
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from npu_compile.configs.compiler_config import CompilerConfig
from npu_compile.errors import BackendError, NoEffectWarning

__all__ = [
    "check_mode",
    "warn_no_effect",
    "resolve_pool",
    "NewGuardError",
    "no_new_guards",
    "options_in_cache_key",
]


def check_mode(config: CompilerConfig) -> None:
    """Refuse ``mode="max-autotune"`` with what runs instead."""
    if config.get("mode") == "max-autotune":
        raise BackendError(
            "config.mode = 'max-autotune' is TorchAir's Graph Engine mode, which needs CANN's GE "
            "runtime; npu-compile runs reduce-overhead (capture and replay) instead: set "
            "config.mode = 'reduce-overhead', or write an offline GE graph with "
            "npu_compile.dynamo_export"
        )


def warn_no_effect(config: CompilerConfig, warned: set[str]) -> None:
    """Warn once (per ``warned`` set) for each option set that has no effect here."""
    for path, option, value in config.options():
        if option.effect is None or value == option.default or path in warned:
            continue
        warned.add(path)
        warnings.warn(
            f"config.{path} = {value!r} has no effect with npu-compile: {option.effect}",
            NoEffectWarning,
            stacklevel=3,
        )
    dump_type = config.get("debug.graph_dump.type")
    if dump_type == "pbtxt" and "debug.graph_dump.type" not in warned:
        warned.add("debug.graph_dump.type")
        warnings.warn(
            "config.debug.graph_dump.type = 'pbtxt' has no effect with npu-compile: it is GE's "
            "graph format; use 'py' or 'txt' (or npu_compile.dynamo_export for a GE graph)",
            NoEffectWarning,
            stacklevel=3,
        )


_lock = threading.Lock()
_tuple_pools: dict[tuple[torch.device, tuple[int, int]], Any] = {}


def _device_of(example_inputs: list[object]) -> torch.device:
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            device = value.device
            if device.type != "cpu" and str(device) == device.type:  # no index given
                device = torch.device(device.type, torch.accelerator.current_device_index())
            return device
    return torch.device("cpu")


def resolve_pool(config: CompilerConfig, example_inputs: list[object]) -> CompilerConfig:
    """Return ``config`` with a pool id tuple in ``use_custom_pool`` replaced by a pool handle."""
    pool = config.get("aclgraph_config.use_custom_pool")
    if not isinstance(pool, tuple):
        return config
    from npu_mempool import PoolHandle, graph_pool_handle

    device = _device_of(example_inputs)
    key = (device, pool)
    with _lock:
        handle = _tuple_pools.get(key)
        if handle is None:
            # On CPU the pool is the emulated arena; on a device the tuple is the allocator's
            # own pool id, which the graph captures into.
            handle = graph_pool_handle("cpu") if device.type == "cpu" else PoolHandle(device, pool)
            _tuple_pools[key] = handle
    resolved = config.copy()
    resolved.aclgraph_config.use_custom_pool = handle
    return resolved


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
    config: CompilerConfig, decompositions: Mapping[Any, Callable[..., Any]]
) -> str:
    from npu_compile._version import __version__

    def name(value: object) -> str:
        # Functions by name: their repr holds an address, which differs in every process.
        qualname = getattr(value, "__qualname__", None)
        return f"{getattr(value, '__module__', '')}.{qualname}" if qualname else repr(value)

    options = sorted((path, name(value)) for path, value in config.items())
    decomposed = sorted((str(op), name(fn)) for op, fn in decompositions.items())
    text = repr((__version__, options, decomposed))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@contextlib.contextmanager
def options_in_cache_key(
    config: CompilerConfig, decompositions: Mapping[Any, Callable[..., Any]]
) -> Iterator[None]:
    """Within the block, AOT autograd's cache keys also hold the backend's options.

    While torch's AOT compile bundles a result, AOT autograd looks the graph up in its on-disk
    cache by the graph, its inputs and torch's own options, not by the backend's: another process
    compiling the same model with other npu-compile options (``debug.run_eagerly``, static
    kernels) would get this one's result. torch 2.13 happens to put a per-process name into that
    key; torch 2.11 does not, and the wrong result was loaded. ``torch.compiler.config.
    cache_key_tag`` is part of the key on every torch that has it: the options' digest joins the
    user's tag there.
    """
    compiler_config = getattr(torch.compiler, "config", None)
    if getattr(compiler_config, "cache_key_tag", None) is None:
        yield
        return
    assert compiler_config is not None
    user_tag = compiler_config.cache_key_tag
    ours = f"npu_compile={_options_digest(config, decompositions)}"
    with compiler_config.patch(cache_key_tag=f"{user_tag};{ours}" if user_tag else ours):
        yield
