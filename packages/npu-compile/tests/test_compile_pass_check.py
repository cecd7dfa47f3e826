"""``debug.aclgraph.check_passes``: a pass that changes what a graph computes is named, not silent.

Each case compiles a small function with the option on. A correct pipeline gives eager's numbers
and no error (also across the passes that change the calling convention); a pass made wrong on
purpose raises ``PassCheckError`` at the first call, naming the pass, the output that differs and
the node that overwrote it; a user's own pass is never blamed.
"""

from __future__ import annotations

from typing import Any

import npu_compile
import pytest
import torch
from npu_compile import CompilerConfig, PassCheckError
from npu_compile._passes import reinplace as _reinplace

aten = torch.ops.aten


def _checked() -> CompilerConfig:
    config = CompilerConfig()
    config.debug.aclgraph.check_passes = True
    return config


def _saved_and_shifted(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = x * 2
    return h, h + 1


def _into_every_operand(graph: torch.fx.Graph) -> int:
    """A reinplace pass without its proof: every ``add`` writes into its first operand."""
    changed = 0
    for node in graph.nodes:
        if node.target is aten.add.Tensor:
            node.target = aten.add_.Tensor
            changed += 1
    return changed


def test_a_correct_pipeline_passes_the_check_and_gives_eager_s_numbers() -> None:
    backend = npu_compile.get_npu_backend(compiler_config=_checked())
    compiled = torch.compile(_saved_and_shifted, backend=backend)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(4, 8)
            got = compiled(x)
            expected = _saved_and_shifted(x)
            torch.testing.assert_close(got[0], expected[0])
            torch.testing.assert_close(got[1], expected[1])
    assert backend.stats.captured == 1


def test_a_wrong_pass_is_named_with_the_output_it_broke_and_the_node_that_did(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_reinplace, "reinplace_intermediates", _into_every_operand)
    x = torch.randn(4, 8)
    unchecked = torch.compile(_saved_and_shifted, backend=npu_compile.get_npu_backend())
    with torch.no_grad():
        wrong = unchecked(x)
    assert not torch.equal(wrong[0], x * 2)  # without the check: a wrong number, no error

    torch._dynamo.reset()
    backend = npu_compile.get_npu_backend(compiler_config=_checked())
    compiled = torch.compile(_saved_and_shifted, backend=backend)
    with torch.no_grad(), pytest.raises(PassCheckError) as raised:
        compiled(x)
    message = str(raised.value)
    assert "the pass reinplace_intermediates changed what the graph computes" in message
    assert "output 0 (mul) differs" in message
    assert "overwritten later, by add" in message
    assert raised.value.code == "backend-pass-check"


def test_ints_made_device_scalars_are_checked_through_the_same_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The int input becomes a 0-d tensor in the graph: the copies after that pass are run
    # through the same conversion as the real call.
    def shifted(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * 2 + n

    backend = npu_compile.get_npu_backend(compiler_config=_checked())
    compiled = torch.compile(shifted, backend=backend)
    x = torch.randn(4, 8)
    with torch.no_grad():
        for n in (1, 2, 3):
            torch.testing.assert_close(compiled(x, n), shifted(x, n))


def test_a_user_pass_is_not_blamed_for_what_it_changes() -> None:
    def double_every_mul(gm: torch.fx.GraphModule, inputs: Any, config: Any) -> None:
        for node in gm.graph.nodes:
            if node.target is aten.mul.Tensor:
                node.args = (node.args[0], 4)  # the user asked for this

    config = _checked()
    config.post_grad_custom_post_pass = double_every_mul
    compiled = torch.compile(
        _saved_and_shifted, backend=npu_compile.get_npu_backend(compiler_config=config)
    )
    x = torch.randn(4, 8)
    with torch.no_grad():
        got = compiled(x)
    torch.testing.assert_close(got[0], x * 4)
