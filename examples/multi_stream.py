"""Two independent branches on two streams inside one captured graph.

``npu_stream_switch`` puts the side branch on its own stream; tagged events order the streams
where data flows between them. npu-compile's backend inserts the fork/join a capture needs and
captures everything into one device graph. On CPU streams are no-ops and the program order is
kept, so the script checks the numbers against eager everywhere.

    python examples/multi_stream.py [--device cpu|cuda|npu]
"""

from __future__ import annotations

import argparse
import sys

import npu_compile
import npu_streams
import torch


class TwoBranches(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ready = npu_streams.npu_create_tagged_event("example-ready")

    def forward(self, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        a = x @ w1  # main stream
        npu_streams.npu_tagged_event_record(self.ready)
        with npu_streams.npu_stream_switch("side"):
            npu_streams.npu_tagged_event_wait(self.ready)  # the side stream waits for `a`
            b = torch.relu(a @ w2)
        c = torch.tanh(x @ w2)  # main stream, while the side stream computes b
        return b + c  # the join before this add is inserted by the backend


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--device", default="cpu", help="where to run: cpu, cuda or npu")
    args = parser.parse_args()

    torch.manual_seed(0)
    x, w1, w2 = (torch.randn(32, 32, device=args.device) for _ in range(3))
    model = TwoBranches()
    expected = model(x, w1, w2)

    backend = npu_compile.get_npu_backend()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    with torch.no_grad():
        for _ in range(3):  # capture, then replays
            torch.testing.assert_close(compiled(x, w1, w2), expected)
    captures = sum(runner.counters.captures for runner in backend.stats.runners)
    replays = sum(runner.counters.replays for runner in backend.stats.runners)
    print(f"matches eager; device graphs captured: {captures}, replays: {replays}")
    if captures != 1:
        print("error: expected one captured graph", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
