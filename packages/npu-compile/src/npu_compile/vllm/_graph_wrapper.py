"""vLLM's static-graph wrapper on :class:`npu_mempool.GraphRunner`.

vLLM builds one wrapper per piece (PIECEWISE) or around the whole model (FULL), then sets the
runtime mode and the batch descriptor in its forward context before each step. The contract
(``vllm/compilation/base_static_graph.py``, ``cuda_graph.py``):

* the runtime mode is NONE or another wrapper's mode: call the runnable as it is;
* otherwise capture once per batch descriptor (and structure of the arguments, which vLLM keeps
  the same for a descriptor), and replay afterwards;
* vLLM keeps the inputs in persistent buffers (padded to a capture size), so the wrapper copies
  nothing in: inputs are recorded by address, and a new address captures again;
* the outputs belong to the graph: vLLM consumes them before the step's next replay of the
  graph writes them again. Each graph is bound with static outputs once captured
  (``GraphRunner.bind(static_outputs=True, all_arguments=True)``): a step that passes the
  bound buffers (addresses, layouts, the same other values) replays with no key, no hand-out and
  no liveness check of its outputs, as vLLM's own CUDA wrapper replays; a step that passes
  anything else is a checked runner call (captured anew for new buffers). The capture's own
  outputs are checked ones: the graph replays statically once they are dead (a static output
  is then reserved, and no checked replay of the pool may write over it, so every graph of the
  pool is bound: a checked replay would have to capture again);
* garbage collection is off during captures after the first piece (``gc_disable``).

One runner per batch descriptor, all on one pool per device, as vLLM captures every size into
one global pool.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from itertools import repeat
from typing import Any

import torch
from npu_mempool import (
    CaptureError,
    CaptureOptions,
    GraphRunner,
    InputKind,
    PoolHandle,
    graph_pool_handle,
)
from torch.utils import _pytree as pytree

from npu_compile._accel import first_tensor_device

__all__ = ["NpuGraphWrapper"]

logger = logging.getLogger("npu_compile")

_pools: dict[str, PoolHandle] = {}
_pools_lock = threading.Lock()


def _shared_pool(device: torch.device) -> PoolHandle:
    # One pool per device for every wrapper of the process, made at the first capture.
    key = str(device)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = graph_pool_handle(device)
        return pool


@contextlib.contextmanager
def _gc_paused(paused: bool) -> Iterator[None]:
    if not paused or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device)
#: What a graph's key holds: none of them is a pytree node, so flat arguments of these types are
#: their own leaves.
_LEAVES = (torch.Tensor, *_SCALARS)


class NpuGraphWrapper:
    """Capture and replay ``runnable`` per batch descriptor, for vLLM's FULL and PIECEWISE modes.

    Args:
        runnable: The model (FULL) or one compiled piece (PIECEWISE).
        vllm_config: vLLM's configuration.
        runtime_mode: The ``CUDAGraphMode`` this wrapper serves (FULL or PIECEWISE).
        cudagraph_options: vLLM's ``CUDAGraphOptions`` (``gc_disable`` is honoured; outputs are
            always the graph's own tensors).
    """

    def __init__(
        self,
        runnable: Callable[..., Any],
        vllm_config: Any,
        runtime_mode: Any,
        cudagraph_options: Any = None,
        **kwargs: Any,
    ) -> None:
        from vllm.config import CUDAGraphMode
        from vllm.forward_context import get_forward_context, is_forward_context_available

        if runtime_mode == CUDAGraphMode.NONE:
            raise ValueError("NpuGraphWrapper serves FULL or PIECEWISE, not NONE")
        # Bound once: __call__ runs on every step of every piece.
        self._none = CUDAGraphMode.NONE
        self._get_forward_context = get_forward_context
        self._is_forward_context_available = is_forward_context_available
        self.runnable = runnable
        self.vllm_config = vllm_config
        self.runtime_mode = runtime_mode
        self.gc_disable = bool(getattr(cudagraph_options, "gc_disable", False))
        self._runners: dict[Hashable, GraphRunner] = {}
        # What a step of each key calls once the key is captured: its bound graph (or its
        # runner, where none can be bound). Read first, without the lock, on every step.
        self._steps: dict[Hashable, Callable[..., Any]] = {}
        self._lock = threading.Lock()

    def __getattr__(self, key: str) -> Any:
        # vLLM reads attributes of the wrapped runnable through the wrapper.
        if key in ("runnable", "__setstate__"):
            raise AttributeError(key)
        return getattr(self.runnable, key)

    def unwrap(self) -> Callable[..., Any]:
        """The runnable, through nested wrappers."""
        runnable = self.runnable
        unwrap = getattr(runnable, "unwrap", None)
        return unwrap() if callable(unwrap) else runnable

    def clear_graphs(self) -> None:
        """Free every captured graph (vLLM calls this when it resets or sleeps)."""
        with self._lock:
            self._steps.clear()
            for runner in self._runners.values():
                runner.reset()
            self._runners.clear()

    @property
    def num_graphs(self) -> int:
        """Graphs held over every batch descriptor."""
        return sum(runner.num_graphs for runner in self._runners.values())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._is_forward_context_available():
            return self.runnable(*args, **kwargs)
        context = self._get_forward_context()
        mode = context.cudagraph_runtime_mode
        if mode == self._none or mode != self.runtime_mode:
            return self.runnable(*args, **kwargs)
        # One runner per batch descriptor and structure of the arguments: a runner calls the
        # runnable with its leaves put back into the structure of its first call, so a call of
        # another structure (keywords in another order, a keyword passed by position) with
        # leaves of the same layouts would otherwise hand each tensor to another parameter.
        structure: Hashable
        if all(map(isinstance, args, repeat(_LEAVES))) and all(
            map(isinstance, kwargs.values(), repeat(_LEAVES))
        ):
            # Flat arguments (vLLM's pieces get flat positional ones; a whole model's forward
            # under FULL graphs, flat keywords): pytree's leaves are the positional values, then
            # the keyword values in their order, and its structure is told by their number and
            # the keywords' names in that order. Flattening them with pytree on every step of
            # every piece costs about 20 µs for nine arguments, many times the replay's own host
            # path (a spec built and hashed per step, some 12 µs more).
            leaves: Sequence[Any] = (*args, *kwargs.values()) if kwargs else args
            structure = (len(args), tuple(kwargs))
        else:
            leaves, structure = pytree.tree_flatten((args, kwargs))
            if not all(map(isinstance, leaves, repeat(_LEAVES))):
                # Something the graph key cannot hold (an opaque object): run it as it is.
                return self.runnable(*args, **kwargs)
        key = (context.batch_descriptor, structure)
        step = self._steps.get(key)
        if step is not None:
            return step(*leaves)
        with self._lock:  # one runner per key, also when two threads see it first
            runner = self._runners.get(key)
            if runner is None:
                spec = pytree.tree_structure((args, kwargs))
                runner = self._runners[key] = self._new_runner(key[0], leaves, spec)
        with _gc_paused(self.gc_disable):
            result = runner(*leaves)
        self._bind(key, runner, leaves)
        return result

    def _bind(self, key: Hashable, runner: GraphRunner, leaves: Sequence[Any]) -> None:
        # At the capture: a graph of the pool left to checked replays would capture again at
        # its next step while another graph's static outputs are reserved.
        try:
            step: Callable[..., Any] = runner.bind(*leaves, static_outputs=True, all_arguments=True)
        except CaptureError:  # the runner holds no graph for the key (it runs eagerly)
            step = runner
        with self._lock:
            if self._runners.get(key) is runner:  # not cleared meanwhile
                self._steps.setdefault(key, step)

    def _new_runner(
        self, descriptor: Hashable, leaves: Sequence[Any], spec: pytree.TreeSpec
    ) -> GraphRunner:
        try:
            from vllm.compilation.monitor import validate_cudagraph_capturing_enabled
        except ImportError:  # an older vLLM: nothing to validate
            pass
        else:
            validate_cudagraph_capturing_enabled()
        runnable = self.runnable

        def call(*flat: Any) -> Any:
            args, kwargs = pytree.tree_unflatten(list(flat), spec)
            return runnable(*args, **kwargs)

        device = first_tensor_device(leaves)
        # vLLM's inputs are persistent buffers: recorded by address, never copied. MUTATED, not
        # PARAMETER: the runner keys them on their layouts too, since a buffer's slices for
        # two sizes start at one address.
        kinds = [
            InputKind.MUTATED if isinstance(leaf, torch.Tensor) else InputKind.USER
            for leaf in leaves
        ]
        runner = GraphRunner(
            call,
            input_kinds=kinds,
            options=CaptureOptions(pool=_shared_pool(device), clone_input=False),
            name=f"vllm-{self.runtime_mode.name.lower()}-{descriptor}",
        )
        logger.debug("capturing %s for %s", self.runtime_mode.name, descriptor)
        return runner
