"""A user's model as it really is: graph breaks, kwargs, dict/tuple/None/non-tensor outputs and
a KV cache written in place, compiled with ``fullgraph=False`` and automatic or forced dynamic
shapes. Every FX graph Dynamo produces goes through the backend; all results must equal eager.
"""

from __future__ import annotations

import npu_compile
import pytest
import torch


class Chatty(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("cache", torch.zeros(16, 8))

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, *, scale: float = 1.0, bias: torch.Tensor | None
    ) -> dict[str, object]:
        y = self.proj(x) * scale
        self.cache.index_copy_(0, pos, y)
        print("graph break")  # splits forward into several FX graphs
        z = y.relu() + self.cache.sum(0)
        out: dict[str, object] = {"y": y, "z": z, "none": None, "n": 3, "pair": (z * 2, "tag")}
        if bias is not None:
            out["biased"] = z + bias
        return out


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic-dynamic", "dynamic"])
def test_graph_breaks_and_python_outputs_match_eager(
    device: torch.device, dynamic: bool | None, capsys: pytest.CaptureFixture[str]
) -> None:
    model, reference = Chatty().to(device), Chatty().to(device)
    reference.load_state_dict(model.state_dict())
    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(model, backend=backend, dynamic=dynamic, fullgraph=False)
    with torch.no_grad():
        for step, n in enumerate([2, 3, 4, 3, 2]):
            x = torch.randn(n, 8, device=device)
            pos = torch.arange(n, device=device) + step
            bias = torch.randn(8, device=device) if step % 2 else None
            got = compiled(x, pos, scale=0.5, bias=bias)
            want = reference(x, pos, scale=0.5, bias=bias)
            assert set(got) == set(want)
            for key in ("y", "z", "biased"):
                if key in want:
                    torch.testing.assert_close(got[key], want[key])
            got_pair, want_pair = got["pair"], want["pair"]
            assert isinstance(got_pair, tuple)
            assert isinstance(want_pair, tuple)
            torch.testing.assert_close(got_pair[0], want_pair[0])
            assert got_pair[1] == "tag"
            assert got["none"] is None
            assert got["n"] == 3
            torch.testing.assert_close(model.cache, reference.cache)
    assert "graph break" in capsys.readouterr().out
    assert backend.stats.fx_graphs >= 2  # the print split the forward
    assert backend.stats.captured == backend.stats.fx_graphs
    assert backend.stats.fallbacks == []
