"""Input classes of a graph (parameters, mutated inputs, user inputs) and what Dynamo guards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from npu_mempool import InputKind

__all__ = ["input_kinds", "runner_is_whole_call"]


def input_kinds(meta: Any, example_inputs: Sequence[Any]) -> list[InputKind]:
    """One :class:`npu_mempool.InputKind` per AOT forward-graph input.

    MUTATED where AOT's metadata says the graph writes the input's data; PARAMETER where it
    lists the input as static (module parameters and buffers, and tensors marked with
    ``torch._dynamo.mark_static_address``); USER otherwise. Without metadata every input is a
    USER input (copied on every call: always correct, never fastest).
    """
    if meta is None:
        return [InputKind.USER] * len(example_inputs)
    tokens = len(meta.tokens)
    static = set(getattr(meta, "static_input_indices", ()) or ())
    kinds = []
    for index in range(len(example_inputs)):
        dynamo_index = index - tokens
        info = meta.input_info[dynamo_index] if 0 <= dynamo_index < len(meta.input_info) else None
        if info is not None and info.mutates_data:
            kinds.append(InputKind.MUTATED)
        elif dynamo_index >= 0 and dynamo_index in static:
            kinds.append(InputKind.PARAMETER)
        else:
            kinds.append(InputKind.USER)
    return kinds


def runner_is_whole_call(meta: Any, fw_gm: torch.fx.GraphModule, n_inputs: int) -> bool:
    """Whether AOT's runtime wrapper would do nothing but call the compiled graph.

    Then the backend returns the graph runner itself and skips the wrapper (about 11 µs per call
    on CPU). That holds in inference when every input mutation is inside the graph, no output
    aliases an input or an intermediate, there are no effect tokens, no tensor subclasses, no
    functionalised RNG, and AOT did not deduplicate inputs. Never for a training graph (an
    output requires grad): AOT's wrapper is the ``autograd.Function`` that records it for the
    backward.
    """
    try:
        placeholders = sum(1 for node in fw_gm.graph.nodes if node.op == "placeholder")
        from torch._functorch._aot_autograd.schemas import PlainTensorMeta

        plain_inputs = all(isinstance(m, (int, PlainTensorMeta)) for m in meta.subclass_inp_meta)
        plain_outputs = all(
            isinstance(m, (int, PlainTensorMeta)) for m in meta.subclass_fw_graph_out_meta
        )
        training = any(getattr(info, "requires_grad", False) for info in meta.output_info)
        return bool(
            not training
            and placeholders == n_inputs
            and meta.num_mutated_inp_runtime_indices == 0
            and not meta.tokens
            and meta.num_outputs_aliased == 0
            and meta.num_intermediate_bases == 0
            and meta.num_unsafe_view_outputs == 0
            and not meta.is_rng_op_functionalized
            and plain_inputs
            and plain_outputs
        )
    except (AttributeError, ImportError):  # an AOT layout we do not know: keep the wrapper
        return False
