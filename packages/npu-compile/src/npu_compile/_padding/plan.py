"""Capture sizes: pad the batch up to a listed size, replay, cut the outputs back.

vLLM (``cudagraph_capture_sizes``) and SGLang (``--cuda-graph-bs``) capture a fixed list of batch
sizes and pad each batch up to the nearest one, so a serving loop whose batch size changes on
every step replays a few graphs instead of capturing one per size. Here a graph is padded only
where that is proven to give the numbers it would give unpadded:

1. The batch is a dimension the user named (``_batch_symbol.find_batch``): marked with
   ``mark_dynamic``, named by ``aclgraph_config.capture_sizes_dim``, or dimension 0.
2. No input is written in place (a buffer update, a cache write): the padded call would write
   a copy, or write the padding rows into the caller's state.
3. Every output row depends only on the same input row (``_batch_proof.prove`` over the rule
   table of ``_batch_rules``): padded rows change no real row.
4. Only capture sizes the graph's guards admit are used (a graph traced at batch 1 is never run
   at batch 4).

Where any of that fails, the graph is captured per exact size, as without ``capture_sizes``,
after one log line naming why (or a ``ConfigError`` under ``debug.aclgraph.strict``). Each size
is captured when a call first needs it, by that call: a call changes the caller's state once,
as the unpadded call would.

The padding rows are copies of the first row, so every padded row computes what a real row
computes: an index or a divisor that is fine for the real rows is fine for the padding too
(zero rows could index out of range or divide by zero where no real row does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from npu_mempool import InputKind

from npu_compile._padding.padded import Padding
from npu_compile._padding.proof import BatchInt, Rows, SliceRows, Unproven, prove
from npu_compile._padding.rules import rule_for
from npu_compile._padding.symbol import Batch, Guards, find_batch
from npu_compile.errors import ConfigError

if TYPE_CHECKING:
    from npu_compile._settings import Settings

__all__ = ["plan_padding"]

logger = logging.getLogger("npu_compile")

CompiledFn = Callable[..., Any]


def plan_padding(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    kinds: Sequence[InputKind],
    settings: Settings,
    name: str,
) -> Padding | None:
    """The padding plan of an AOT forward graph, or ``None``: captured per exact size.

    Args:
        gm: The AOT forward graph.
        example_inputs: Its example inputs.
        kinds: The input classes of its inputs.
        settings: The lowered options (``capture_sizes``, ``capture_sizes_dim``, ``strict``).
        name: The FX graph's name, for messages.

    Raises:
        ConfigError: Under ``debug.aclgraph.strict``, the graph cannot be padded.
    """
    sizes = settings.capture_sizes
    strict = settings.strict

    def refuse(why: str) -> None:
        message = (
            f"FX graph {name} is captured per batch size, not padded to "
            f"aclgraph_config.capture_sizes: {why}"
        )
        if strict:
            raise ConfigError(
                f"{message} (debug.aclgraph.strict is set; unset it to capture such graphs per "
                "size, or leave capture_sizes unset)"
            )
        logger.warning(message)

    found = find_batch(example_inputs, settings.capture_sizes_dim)
    if found is None:
        return None
    if isinstance(found, str):
        refuse(found)
        return None
    guards = Guards(found.symbol, example_inputs)
    admitted, left_out = guards.admitted(sizes)
    if not guards.pads_some_batch(admitted):
        # Traced under a guard that pins the batch (Eq(s0, 1)): every call runs at a size it
        # may run at, so there is nothing to pad and nothing to prove.
        logger.info(
            "FX graph %s is captured per batch size: its guards leave no batch to pad (%s)",
            name,
            "; ".join(sorted(set(left_out.values()))) or "no listed size above a batch",
        )
        return None
    written = _written_input(gm, kinds)
    if written is not None:
        refuse(written)
        return None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    dims = dict(found.tensor_dims)
    states = [Rows(dims[i]) if i in dims else None for i in range(len(placeholders))]
    try:
        proof = prove(gm, found.symbol, states, rule_for)
    except Unproven as error:
        refuse(f"{error}; padding rows could change real rows there")
        return None
    admitted, left_out = guards.admitted(sizes, proof.bounds)
    if left_out:
        logger.info(
            "FX graph %s: capture sizes %s left out, the graph holds only where %s",
            name,
            sorted(left_out),
            "; ".join(sorted(set(left_out.values()))),
        )
    if not admitted:
        return None
    return _padding(found, admitted, sizes[-1], proof.outputs)


def _padding(
    batch: Batch,
    admitted: tuple[int, ...],
    largest: int,
    outputs: tuple[SliceRows | BatchInt | None, ...],
) -> Padding:
    return Padding(
        sizes=admitted,
        largest=largest,
        tensor_dims=batch.tensor_dims,
        int_args=batch.int_args,
        outputs=outputs,
        symbol=str(batch.symbol),
    )


def _written_input(gm: torch.fx.GraphModule, kinds: Sequence[InputKind]) -> str | None:
    """Why the graph writes an input in place (a buffer update, a KV-cache write), if it does.

    A padded call runs on padded copies: the write would go to the copy, or carry the padding
    rows into the caller's state.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for index, kind in enumerate(kinds):
        if kind is not InputKind.MUTATED or index >= len(placeholders):
            continue
        target = placeholders[index]
        writer = next(
            (
                user
                for user in target.users
                if isinstance(user.target, torch._ops.OpOverload) and user.target._schema.is_mutable
            ),
            None,
        )
        where = f"node {writer.name} ({writer.target}) " if writer is not None else ""
        return f"{where}updates the graph input {target.name} in place (state such as a buffer)"
    return None
