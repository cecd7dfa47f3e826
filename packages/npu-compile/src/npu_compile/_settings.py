"""What every graph of a backend reads: the options, lowered once into typed, frozen records.

``_lowering.lower`` turns a :class:`~npu_compile.CompilerConfig` into a :class:`Settings` when a
backend is made (and once per ``torch.compile(options=...)`` call). Below the backend nothing
reads the option tree: each module reads the typed field it needs, under one name per option.
Where the TorchAir name is a negation (``disable_...``), the field here says what happens
(``reinplace_intermediates``, ``reuse_pool_across_shapes``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import torch
from npu_mempool import CaptureOptions
from npu_static_kernel import StaticKernelOptions

__all__ = ["DataDump", "Dump", "Settings", "UserPass"]


@dataclasses.dataclass(frozen=True)
class Dump:
    """A file written per FX graph (``debug.graph_dump``, ``debug.fx_summary``).

    Attributes:
        kind: The file's format, which is also its extension (``"py"``, ``"txt"``, ``"csv"``).
        folder: Where the files go.
    """

    kind: str
    folder: str = "."

    def path_for(self, name: str) -> str:
        """Where the file of the graph ``name`` goes (TorchAir's naming)."""
        stamp = datetime.now(tz=UTC).strftime("%Y%m%d%H%M%S%f")
        return os.path.join(self.folder, f"{name}_rank_0_pid_{os.getpid()}_ts_{stamp}.{self.kind}")


@dataclasses.dataclass(frozen=True)
class DataDump:
    """``debug.data_dump``: graphs run eagerly, saving every operator's inputs and outputs.

    Attributes:
        folder: The root of the dumps (the current directory when the option names none).
        keep: ``fn(node) -> node or None``: only the nodes it returns are dumped.
    """

    folder: str | None
    keep: Callable[[torch.fx.Node], torch.fx.Node | None] | None = None


@dataclasses.dataclass(frozen=True)
class UserPass:
    """A pass of the user's (``post_grad_custom_pre_pass``/``post_grad_custom_post_pass``).

    TorchAir calls it with the graph, its example inputs and the user's config object, which is
    carried here as it was given, for that call only.

    Attributes:
        name: The option's name, for messages.
        function: The user's function.
        config: Its third argument.
    """

    name: str
    function: Callable[..., Any]
    config: object

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        return self.function(gm, list(example_inputs), self.config)


@dataclasses.dataclass(frozen=True)
class Settings:
    """A backend's options, lowered; frozen, shared by every graph it compiles.

    Attributes:
        capture: Whether graphs are captured at all. ``False`` runs every graph through the
            whole pipeline without capture: ``debug.run_eagerly``, a data dump, an FX summary
            with ``skip_compile``, or an engine that captures itself (vLLM).
        capture_options: What every graph runner of the backend is given (``strict`` among
            them, read through :attr:`strict`).
        pool_id: A graph pool named by id tuple (``use_custom_pool``), resolved per device.
        shared_pool: Whether ``use_custom_pool`` names a pool of this process (by handle or id).
        static_kernels: The static-kernel options, ``None`` when static kernels are off.
        static_kernel_sym_index: Which int argument of a graph the range below reads.
        static_kernel_sym_range: The values of that argument that get static kernels (``None``:
            every value).
        piecewise: Whether graphs may be captured in pieces around what cannot be captured.
        splitting_ops: Ops that always run eagerly between pieces.
        capture_sizes: Batch sizes graphs are padded to (empty: captured per exact size).
        capture_sizes_dim: The dimension that holds the batch, when named.
        pre_pass: The user's pass before npu-compile's (``post_grad_custom_pre_pass``).
        post_pass: The user's pass after no-op removal (``post_grad_custom_post_pass``).
        remove_noop_ops: Remove ops that return their input (``remove_noop_ops``).
        reinplace_intermediates: Write functional ops into dead intermediates.
        reinplace_input_mutations: Write ops copied back into an input into that input.
        check_passes: Check each graph pass against the graph before it at the first call.
        keep_inference_input_mutations: AOT keeps input mutations inside inference graphs.
        graph_dump: Where each graph's code goes (``debug.graph_dump``), if anywhere.
        fx_summary: Where each graph's operator statistics go (``debug.fx_summary``).
        data_dump: The data dump (``debug.data_dump``), if on.
        options_digest: A digest of every option, for the keys of torch's compile caches.
    """

    capture: bool
    capture_options: CaptureOptions
    pool_id: tuple[int, int] | None = None
    shared_pool: bool = False
    static_kernels: StaticKernelOptions | None = None
    static_kernel_sym_index: int = 0
    static_kernel_sym_range: tuple[int, ...] | None = None
    piecewise: bool = False
    splitting_ops: tuple[str, ...] = ()
    capture_sizes: tuple[int, ...] = ()
    capture_sizes_dim: int | None = None
    pre_pass: UserPass | None = None
    post_pass: UserPass | None = None
    remove_noop_ops: bool = True
    reinplace_intermediates: bool = True
    reinplace_input_mutations: bool = True
    check_passes: bool = False
    keep_inference_input_mutations: bool = True
    graph_dump: Dump | None = None
    fx_summary: Dump | None = None
    data_dump: DataDump | None = None
    options_digest: str = ""

    @property
    def strict(self) -> bool:
        """Raise instead of falling back to eager (``debug.aclgraph.strict``)."""
        return self.capture_options.strict
