"""No pass of the backend specialises a symbolic size.

Serving engines mark the token count dynamic and trace once (vLLM drops Dynamo's guards
altogether). A pass that decides on the example sizes, such as torch's reinplace pass comparing
two numels whose hints happen to be equal, would pin a relation between sizes: Dynamo then
recompiles for other sizes, and with guards dropped the graph is wrong for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import npu_compile
import pytest
import torch


def _write_prefix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # reinplace compares numel(clone) with numel(b): equal for equal hints, not in general.
    x = a.clone()
    x[: b.shape[0]] = b
    return x * 2


def _compiled(fn: Callable[..., Any], **compile_kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    backend = npu_compile.get_npu_backend()
    return backend, torch.compile(fn, backend=backend, **compile_kwargs)


def _dynamic(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    for t in tensors:
        torch._dynamo.mark_dynamic(t, 0)
    return tensors


def test_equal_hints_are_not_pinned() -> None:
    backend, compiled = _compiled(_write_prefix)
    first = _dynamic(torch.randn(16, 4), torch.randn(16, 4))
    with torch.no_grad():
        torch.testing.assert_close(compiled(*first), _write_prefix(*first))
        for rows in (8, 12):  # b shorter than a: the sizes the pass must not have ruled out
            args = (torch.randn(16, 4), torch.randn(rows, 4))
            torch.testing.assert_close(compiled(*args), _write_prefix(*args))
    assert backend.stats.fx_graphs == 1, "a pass added a guard on the sizes: Dynamo recompiled"
    assert backend.stats.fallbacks == []


def test_equal_hints_are_not_pinned_without_error_on_new_guards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torch 2.11 has no ShapeEnv.error_on_new_guards: the backend then refuses the guard where
    # every new guard passes (ShapeEnv._check_frozen). The same run as above, on that path.
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    if hasattr(ShapeEnv, "error_on_new_guards"):
        monkeypatch.delattr(ShapeEnv, "error_on_new_guards")
    backend, compiled = _compiled(_write_prefix)
    first = _dynamic(torch.randn(16, 4), torch.randn(16, 4))
    with torch.no_grad():
        torch.testing.assert_close(compiled(*first), _write_prefix(*first))
        args = (torch.randn(16, 4), torch.randn(8, 4))
        torch.testing.assert_close(compiled(*args), _write_prefix(*args))
    assert backend.stats.fx_graphs == 1, "a pass added a guard on the sizes: Dynamo recompiled"


def test_equal_hints_with_guards_dropped_as_vllm_does() -> None:
    # vLLM compiles with every guard skipped: a specialised graph would run for all sizes.
    backend, compiled = _compiled(
        _write_prefix, options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe}
    )
    first = _dynamic(torch.randn(16, 4), torch.randn(16, 4))
    with torch.no_grad():
        compiled(*first)
        args = (torch.randn(16, 4), torch.randn(8, 4))
        torch.testing.assert_close(compiled(*args), _write_prefix(*args))
    assert backend.stats.fx_graphs == 1


def _kv_write(x: torch.Tensor, cache: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    # Input reinplace: index_copy + copy_ back into the cache becomes one index_copy_.
    cache.index_copy_(0, index, x * 2)
    return cache[: x.shape[0]].sum(1)


def _noop_views(x: torch.Tensor) -> torch.Tensor:
    # remove_noop_ops: a view to the same shape and a slice over everything.
    y = x.view(x.shape)[: x.shape[0]]
    return (y + 1).relu()


def _intermediates(x: torch.Tensor) -> torch.Tensor:
    # reinplace of intermediates: add/mul whose inputs die become in-place ops.
    return ((x * 3) + 1).sigmoid() * 2


def _int_input(x: torch.Tensor, n: int) -> torch.Tensor:
    # An int deciding no shape becomes a device scalar (tensorify).
    return x * n + n


def _streams(x: torch.Tensor) -> torch.Tensor:
    # Stream scopes: the fork/join pass (the reinplace passes are skipped with streams).
    with npu_compile.scope.npu_stream_switch("side"):
        y = x * 2
    return y + x


CASES = {
    "input_reinplace": (
        _kv_write,
        lambda n: (torch.randn(n, 4), torch.zeros(64, 4), torch.arange(n)),
        (0, 2),
    ),
    "remove_noop_ops": (_noop_views, lambda n: (torch.randn(n, 4),), (0,)),
    "reinplace": (_intermediates, lambda n: (torch.randn(n, 4),), (0,)),
    "tensorify": (_int_input, lambda n: (torch.randn(n, 4), n + 1), (0,)),
    "streams": (_streams, lambda n: (torch.randn(n, 4),), (0,)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_pass_keeps_sizes_symbolic(case: str) -> None:
    fn, make, dynamic = CASES[case]
    config = npu_compile.CompilerConfig()
    config.experimental_config.remove_noop_ops = True
    backend = npu_compile.get_npu_backend(compiler_config=config)
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    with torch.no_grad():
        for n in (8, 5, 13):
            args = make(n)
            reference = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            for i in dynamic:
                torch._dynamo.mark_dynamic(args[i], 0)
            torch.testing.assert_close(compiled(*args), fn(*reference))
    assert backend.stats.fx_graphs == 1, f"{case}: recompiled for another size"
    assert backend.stats.fallbacks == []
