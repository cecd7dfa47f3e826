"""Subprocess worker for the multi-process tests (run as a script, never collected by pytest).

Modes:
    spawn <build_dir> <out_dir> <nprocs>   nprocs gloo ranks on one node, each compile_static + run
    slow <build_dir> <ready_file>          a build that writes part of its artifact, then hangs
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch
from npu_static_kernel import InductorBuilder, StaticKernelCompiler, compute_key


def graph_fn(buf: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
    """An ATen graph like AOT autograd's: a matmul, and an input updated in place with copy_."""
    hidden = torch.ops.aten.relu.default(torch.ops.aten.mm.default(x, w))
    torch.ops.aten.copy_.default(buf, torch.ops.aten.add.Tensor(buf, hidden))
    return (torch.ops.aten.mul.Tensor(hidden, 2.0),)


def make_case(rows: int = 4) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """The graph and deterministic arguments (identical in every process)."""
    gen = torch.Generator().manual_seed(0)
    args = [
        torch.zeros(rows, 8),
        torch.randn(rows, 16, generator=gen),
        torch.randn(16, 8, generator=gen),
    ]
    # symbolic_trace keeps every aten call (copy_ included) and is much cheaper than make_fx.
    return torch.fx.symbolic_trace(graph_fn), args


def clone_args(args: list[torch.Tensor]) -> list[torch.Tensor]:
    return [a.clone() for a in args]


def _rank_main(rank: int, nprocs: int, port: int, build_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    os.environ["LOCAL_WORLD_SIZE"] = str(nprocs)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nprocs
    )
    try:
        gm, args = make_case()
        compiler = StaticKernelCompiler(build_dir)
        fn = compiler.compile_static(gm, args)
        compiled_args, eager_args = clone_args(args), clone_args(args)
        out = fn(*compiled_args)
        ref = gm(*eager_args)
        report: dict[str, Any] = {
            "rank": rank,
            "counters": vars(compiler.counters),
            "compiled": fn != gm.forward,
            "output": out[0].tolist(),
            "buffer": compiled_args[0].tolist(),
            "matches_eager": bool(
                torch.allclose(out[0], ref[0]) and torch.allclose(compiled_args[0], eager_args[0])
            ),
        }
        tmp = Path(out_dir) / f".rank{rank}.json"
        tmp.write_text(json.dumps(report))
        os.replace(tmp, Path(out_dir) / f"rank{rank}.json")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SlowBuilder(InductorBuilder):
    """Writes part of its artifact, announces it, then hangs until killed."""

    def __init__(self, ready_file: str) -> None:
        super().__init__()
        self.ready_file = ready_file

    def build(self, request: Any, out_dir: Path) -> None:
        (out_dir / "inductor_artifact.bin").write_bytes(b"half-written")
        Path(self.ready_file).write_text(request.key)
        time.sleep(600)


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "spawn":
        build_dir, out_dir, nprocs = argv[1], argv[2], int(argv[3])
        import torch.multiprocessing as mp

        mp.spawn(_rank_main, args=(nprocs, _free_port(), build_dir, out_dir), nprocs=nprocs)
    elif mode == "slow":
        build_dir, ready_file = argv[1], argv[2]
        gm, args = make_case()
        builder = SlowBuilder(ready_file)
        assert compute_key(gm, args, builder) == compute_key(gm, args, InductorBuilder())
        StaticKernelCompiler(build_dir, builder=builder, strict=True).compile_static(gm, args)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
