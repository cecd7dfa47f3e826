"""Training graphs: the backward graph AOT autograd partitions off a forward, captured too.

For an FX graph that records autograd, AOT autograd traces the joint graph and partitions it into
a forward graph (the user outputs, then the tensors saved for backward) and a backward graph
(saved tensors and output gradients in, input gradients out), and runs both inside one
``torch.autograd.Function``. The forward goes through the pipeline like an inference graph, behind
AOT's wrapper. :class:`BackwardCompiler` is AOT's ``bw_compiler``: it captures the backward graph
into a graph runner of its own, when the first backward of the graph runs.

Memory. Saved tensors are outputs of the captured forward, held by autograd until the backward
has run; the gradients the backward hands out may be stolen by ``AccumulateGrad`` into
``param.grad`` and so stay in graph memory until the optimizer's ``zero_grad``. Both are outputs
the runners track (``npu_mempool``'s [Note: output liveness]), and neither is ever taken back:
autograd holds them. A loss kept from the previous iteration is a forward output of an ended step
(each iteration's forward begins one), which the forward's runner may overwrite; gradients kept
with ``zero_grad(set_to_none=False)`` make the backward replay on a second call path instead.

Steps. A training forward holds its thread's step open until a backward has run
(``npu_mempool.hold_step``): two forwards of one iteration (two inputs through one model, then
one loss) are one step, so the second does not take back the outputs of the first. As CUDA Graph
Trees, any backward releases every hold (a forward whose backward never runs, such as an
evaluation forgotten outside ``torch.no_grad()``, must not hold its thread's step once another
backward ran); ``torch._dynamo.reset()`` releases them too. Until then, such a thread's calls
keep held outputs as with ``keep_held_outputs``. The backward runner keeps every output held
(npu-mempool's ``keep_held_outputs``): it runs in autograd's thread, outside any call of the
compiled function, and its outputs (gradients) feed autograd, not the caller.

Backward graphs get neither the post-grad passes nor static kernels (the forward keeps both;
neither has been validated on backward graphs), and every input is copied into the graph's own
buffers, whatever ``clone_input`` says, except the saved tensors that are a parameter (or a view
of one), whose address the runner watches as it does the forward's parameters.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import npu_mempool
import npu_streams
import torch
from npu_mempool import InputKind

# torch's lazy form of ``torch._dynamo.disable``: importing this module does not import Dynamo.
from torch._compile import _disable_dynamo

from npu_compile._capturable import host_sync_reason
from npu_compile._fallback import boxed, fall_back, forward_of
from npu_compile._lowering import pool_options
from npu_compile._plan import PoolChoice, PoolSource
from npu_compile.errors import FallbackReason

if TYPE_CHECKING:
    from npu_compile._settings import Settings
    from npu_compile._stats import BackendStats

__all__ = ["BackwardCompiler", "release_holds"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]

# Threads whose step a training forward holds open until a backward runs (any backward, of any
# graph: see the module docstring). Process-wide: the backward may run in autograd's thread.
_holding: set[int] = set()
_holding_lock = threading.Lock()


def release_holds() -> None:
    """End every step hold of a training forward (a backward ran, or Dynamo was reset)."""
    if not _holding:
        return
    with _holding_lock:
        threads = list(_holding)
        _holding.clear()
    for thread in threads:
        npu_mempool.release_step(thread)


class BackwardCompiler:
    """AOT autograd's ``bw_compiler`` for one FX graph: the backward graph into a graph runner.

    Args:
        name: The FX graph's name (the backward's runner is ``<name>_backward``).
        settings: The lowered options.
        stats: The backend's statistics (the runner is listed there; ``captured`` counts FX
            graphs, so it does not move).
    """

    def __init__(self, name: str, settings: Settings, stats: BackendStats) -> None:
        self.name = f"{name}_backward"
        self._settings = settings
        self._stats = stats
        self._parameters: frozenset[str] = frozenset()
        self._training = False
        # The pool the forward's plan chose (the forward compiler sets it before AOT can ask
        # for the backward).
        self.pool = PoolChoice()

    def saw_forward(self, fw_gm: torch.fx.GraphModule, kinds: Sequence[InputKind]) -> None:
        """Remember which forward nodes are a parameter or a view of one (before passes).

        AOT's partitioner gives each saved tensor's backward placeholder the name of the forward
        node that computed it; a saved parameter (``primals_1``) or view of one (``t_1``) is then
        the parameter's own memory, at the parameter's address, on every step.
        """
        self._training = True
        placeholders = [n for n in fw_gm.graph.nodes if n.op == "placeholder"]
        names = {
            node.name
            for node, kind in zip(placeholders, kinds, strict=False)
            if kind is InputKind.PARAMETER
        }
        for node in fw_gm.graph.nodes:
            if (
                node.op == "call_function"
                and getattr(node.target, "is_view", False)
                and node.args
                and isinstance(node.args[0], torch.fx.Node)
                and node.args[0].name in names
            ):
                names.add(node.name)
        self._parameters = frozenset(names)

    def track(self, forward: CompiledFn) -> CompiledFn:
        """What AOT gets as the forward: for a training graph, ``forward`` holding the step.

        After every training forward, the calling thread's step stays open until a backward of
        this graph has run (see the module docstring). Other graphs get ``forward`` itself.
        """
        if not self._training:
            return forward

        def hold() -> None:
            thread = npu_mempool.hold_step()
            if thread not in _holding:
                with _holding_lock:
                    _holding.add(thread)

        if getattr(forward, "_boxed_call", False):

            def held(args: list[Any]) -> Any:
                out = forward(args)
                hold()
                return out

            held._boxed_call = True  # type: ignore[attr-defined]
            return held

        def call(*args: Any) -> Any:
            out = forward(*args)
            hold()
            return out

        call.__name__ = call.__qualname__ = getattr(forward, "__name__", "forward")
        return call

    def _released(self, backward: CompiledFn) -> CompiledFn:
        """``backward`` (boxed) ending the step holds of training forwards once it has run."""

        def call(args: list[Any]) -> Any:
            out = backward(args)
            release_holds()
            return out

        call._boxed_call = True  # type: ignore[attr-defined]
        return call

    @_disable_dynamo
    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledFn:
        """Capture the backward graph ``gm`` (called by AOT at the first backward).

        AOT compiles the backward inside autograd, when it first runs. If ``backward()`` was
        called in a compiled function (a train step), Dynamo's frame hook is active there: it
        would trace this compiler and the backward it returns, our runtime, into graphs of their
        own. Neither is traced, as torch's AOT backends keep it ([Note: torch's backend
        contract] in ``_pipeline``); ``disable`` keeps ``_boxed_call``.
        """
        backward = self._released(self._compile(gm, example_inputs))
        return _disable_dynamo(backward)

    def _compile(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledFn:
        device = next((t.device for t in example_inputs if isinstance(t, torch.Tensor)), None)
        prepared = npu_streams.prepare_for_capture(gm, device)
        reason = host_sync_reason(prepared)
        if reason is not None:
            return boxed(self._fallback(prepared, FallbackReason.HOST_SYNC, reason))
        if not self._settings.capture:
            return boxed(forward_of(prepared))
        placeholders = [n for n in prepared.graph.nodes if n.op == "placeholder"]
        kinds = [
            InputKind.PARAMETER if node.name in self._parameters else InputKind.USER
            for node in placeholders
        ]
        # Autograd hands the backward tensors it owns (saved tensors, output gradients): copied
        # into graph buffers whatever clone_input says, since without the copy a later call
        # would be copied into the first call's tensors, which may be someone's gradient now.
        # Its outputs are kept while held (see the module docstring).
        # The forward's pool where the user named one; a split forward's pieces share a pool of
        # their own, and the backward (one whole graph) keeps its own, as before the split.
        pool = self.pool if self.pool.source is not PoolSource.PIECES else PoolChoice()
        options = pool_options(
            pool,
            self._settings,
            torch.device(device) if device is not None else torch.device("cpu"),
            clone_input=True,
            keep_held_outputs=True,
        )
        runner = npu_mempool.GraphRunner(
            forward_of(prepared), input_kinds=kinds, options=options, name=self.name
        )
        self._stats.record_runner(runner)
        logger.info(
            "FX graph %s: %d inputs (%d parameter, %d user) captured per graph key",
            self.name,
            len(kinds),
            kinds.count(InputKind.PARAMETER),
            kinds.count(InputKind.USER),
        )
        return boxed(runner.as_function())

    def _fallback(
        self, gm: torch.fx.GraphModule, reason: FallbackReason, message: str
    ) -> CompiledFn:
        return fall_back(gm, self.name, (reason, message), self._settings.strict, self._stats)
