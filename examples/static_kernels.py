"""Static (shape-specialised) kernels under npu-compile.

With ``experimental_config.aclgraph._aclnn_static_shape_kernel`` on, each new input shape first
records the op statistics of one eager run, builds kernels for exactly that shape (Inductor C++ on
CPU, Triton on CUDA, CANN ``op_compiler`` on Ascend), caches them on disk, and captures the graph
that calls them. A second run of the script finds the kernels in the cache.

    python examples/static_kernels.py [--build-dir static_kernel_build] [--device cpu]

On CPU this needs a C++ compiler (``npu-compile doctor`` checks). Then try
``npu-static-kernel list --build-dir static_kernel_build``.
"""

from __future__ import annotations

import argparse
import sys

import npu_compile
import torch
from npu_static_kernel import ArtifactCache


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--build-dir", default="static_kernel_build", help="build and cache dir")
    parser.add_argument("--device", default="cpu", help="where to run: cpu, cuda or npu")
    args = parser.parse_args()

    config = npu_compile.CompilerConfig()
    config.mode = "reduce-overhead"
    config.experimental_config.aclgraph._aclnn_static_shape_kernel = True
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir = args.build_dir
    model = MLP().to(args.device).eval()
    compiled = torch.compile(model, backend=npu_compile.get_npu_backend(compiler_config=config))

    with torch.no_grad():
        for batch in (4, 4, 8):  # two shapes: two builds (or cache hits), three calls
            x = torch.randn(batch, 16, device=args.device)
            torch.testing.assert_close(compiled(x), model(x))
            print(f"batch {batch}: matches eager")

    entries = ArtifactCache(args.build_dir).entries()
    for entry in entries:
        print(f"cached kernels {entry.key[:12]} ({entry.builder}) for {', '.join(entry.inputs)}")
    if not entries:
        print("error: no static kernel artifact was cached", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
