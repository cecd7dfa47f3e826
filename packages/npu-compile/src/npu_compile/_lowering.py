"""The CompilerConfig lowered once into :class:`~npu_compile._settings.Settings`.

:func:`lower` runs when a backend is made (and once per ``torch.compile(options=...)`` call),
never per graph: the capture options and the static-kernel options are built, and so validated,
once, by the package that owns them (``npu_mempool.CaptureOptions``,
``npu_static_kernel.StaticKernelOptions``), and every other option becomes a typed field under
one name. This is the one module below the backend that reads the option tree.
:func:`pool_options` turns the pool a plan chose into a runner's capture options.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from typing import TYPE_CHECKING, Any

import torch
from npu_mempool import CaptureOptions, PoolHandle, graph_pool_handle
from npu_static_kernel import StaticKernelOptions

from npu_compile._accel import with_index
from npu_compile._plan import PoolChoice, PoolSource
from npu_compile._settings import DataDump, Dump, Settings, UserPass

if TYPE_CHECKING:
    from npu_compile.configs.compiler_config import CompilerConfig

__all__ = ["lower", "pool_options"]


def pool_options(
    choice: PoolChoice, settings: Settings, device: torch.device, **overrides: Any
) -> CaptureOptions:
    """The capture options of a runner of a graph whose plan chose ``choice`` (on ``device``).

    The one place a pool the plan chose becomes a ``PoolHandle``: the user's own, the
    process-wide one of a pool id on this device, or a new one for a graph's pieces. ``OWN``
    leaves it to the runner. ``overrides`` are other ``CaptureOptions`` fields (the backward's).
    """
    if choice.source is PoolSource.ID:
        assert choice.pool_id is not None
        overrides["pool"] = _pool_for(device, choice.pool_id)
    elif choice.source is PoolSource.PIECES:
        overrides["pool"] = graph_pool_handle(device)
    if not overrides:
        return settings.capture_options
    return dataclasses.replace(settings.capture_options, **overrides)


def lower(
    config: CompilerConfig, *, capture: bool = True, build_dir: str | None = None
) -> Settings:
    """Lower ``config`` once; ``capture=False`` runs every graph without capture.

    ``build_dir`` is the static kernels' directory where the config names none (an engine's
    cache directory).

    Raises:
        npu_mempool.ConfigError: A capture option npu-mempool refuses.
        npu_static_kernel.ConfigError: A static-kernel option npu-static-kernel refuses.
    """
    aclgraph = config.debug.aclgraph
    chosen = config.aclgraph_config.use_custom_pool
    # The option's validator admits None, a PoolHandle or a pool id tuple.
    pool_id = chosen if isinstance(chosen, tuple) else None
    handle = chosen if isinstance(chosen, PoolHandle) else None
    # A pool id tuple is resolved per device; until then the graph has a pool of its own (mode 1
    # still turns mode 2 off: TorchAir's rule, read from the option, not from the handle).
    shared = chosen is not None
    capture_options = CaptureOptions(
        pool=handle,
        # Mode 1 (a shared pool) turns mode 2 (reuse inside one FX graph) off, as in TorchAir.
        reuse_pool_across_shapes=not shared and not aclgraph.disable_mempool_reuse_in_same_fx,
        # Plain bool/int: config reads are views that also carry TorchAir's `.value`.
        clone_input=bool(aclgraph.clone_input),
        clone_output=bool(aclgraph.enable_output_clone),
        check_output_overwrite=bool(aclgraph.check_output_overwrite),
        capture_limit=int(aclgraph.static_capture_size_limit),
        frozen_parameters=bool(config.experimental_config.frozen_parameter),
        strict=bool(aclgraph.strict),
        capture_error_mode=str(aclgraph.capture_error_mode),
        force_recapture=bool(aclgraph.force_recapture),
        # Each call of the compiled function begins a new step unless the user keeps held
        # outputs (the policy before steps per call).
        keep_held_outputs=bool(aclgraph.keep_held_outputs),
        # warmup_runs left to npu-mempool: it knows which devices need an eager call per new
        # shape before capturing it (CUDA's lazily initialised cuBLAS).
    )
    debug = config.debug
    summary = debug.fx_summary
    eager = (
        debug.run_eagerly or debug.data_dump.enabled or (summary.enabled and summary.skip_compile)
    )
    sizes = config.aclgraph_config.capture_sizes
    dim = config.aclgraph_config.capture_sizes_dim
    static = config.experimental_config.aclgraph
    sym_range = static.get("_aclnn_static_shape_kernel_sym_value_range")
    return Settings(
        capture=capture and not eager,
        capture_options=capture_options,
        pool_id=pool_id,
        shared_pool=shared,
        static_kernels=_static_kernel_options(config, build_dir),
        static_kernel_sym_index=int(static._aclnn_static_shape_kernel_sym_index),
        static_kernel_sym_range=None if sym_range is None else tuple(sym_range),  # type: ignore[arg-type]
        piecewise=bool(config.aclgraph_config.piecewise),
        splitting_ops=tuple(config.aclgraph_config.splitting_ops),
        capture_sizes=tuple(sizes) if sizes else (),
        capture_sizes_dim=None if dim is None else int(dim),
        pre_pass=_user_pass(config, "post_grad_custom_pre_pass"),
        post_pass=_user_pass(config, "post_grad_custom_post_pass"),
        remove_noop_ops=bool(config.experimental_config.remove_noop_ops),
        reinplace_intermediates=not aclgraph.disable_reinplace_inplaceable_ops_pass,
        reinplace_input_mutations=not aclgraph.disable_reinplace_input_mutated_ops_pass,
        check_passes=bool(aclgraph.check_passes),
        keep_inference_input_mutations=bool(
            config.experimental_config.keep_inference_input_mutations
        ),
        graph_dump=_dump(debug.graph_dump, ("py", "txt")),
        fx_summary=_dump(summary, ("csv",)),
        data_dump=_data_dump(config),
        options_digest=options_digest(config),
    )


def _user_pass(config: CompilerConfig, name: str) -> UserPass | None:
    function = config.get(name)
    if function is None:
        return None
    assert callable(function)  # the option's validator
    return UserPass(name, function, config)


def _dump(node: Any, kinds: tuple[str, ...]) -> Dump | None:
    """A dump option as a :class:`Dump`, if it is on in a format written here."""
    kind = node.get("type")
    if kind not in kinds:
        return None  # off, or a format this backend does not write (GE's pbtxt)
    return Dump(str(kind), str(node.get("path") or "."))


def _data_dump(config: CompilerConfig) -> DataDump | None:
    dump = config.debug.data_dump
    if dump.get("type") is None:
        return None
    folder = dump.get("path")
    return DataDump(None if folder is None else str(folder), dump.get("filter"))  # type: ignore[arg-type]


def options_digest(config: CompilerConfig) -> str:
    """A digest of every option of ``config``, the same in every process for the same options."""
    from npu_compile._version import __version__

    def name(value: object) -> str:
        # Functions by name: their repr holds an address, which differs in every process.
        qualname = getattr(value, "__qualname__", None)
        return f"{getattr(value, '__module__', '')}.{qualname}" if qualname else repr(value)

    options = sorted((path, name(value)) for path, value in config.items())
    return hashlib.sha256(repr((__version__, options)).encode()).hexdigest()[:16]


def _static_kernel_options(
    config: CompilerConfig, default_dir: str | None
) -> StaticKernelOptions | None:
    static = config.experimental_config.aclgraph
    if not static._aclnn_static_shape_kernel:
        return None
    named = static._aclnn_static_shape_kernel_build_dir
    return StaticKernelOptions(
        build_dir=named if named is not None else default_dir,
        # strict: a failed build raises instead of running the graph without static kernels.
        strict=bool(config.debug.aclgraph.strict),
        fallback_dir=static._aclnn_static_shape_kernel_fallback_dir,
    )


_pools_lock = threading.Lock()
_pools: dict[tuple[torch.device, tuple[int, int]], PoolHandle] = {}


def _pool_for(device: torch.device, pool_id: tuple[int, int]) -> PoolHandle:
    # One handle per (device, id) for the whole process: every backend naming the id shares it.
    device = with_index(device)
    key = (device, pool_id)
    with _pools_lock:
        handle = _pools.get(key)
        if handle is None:
            # On CPU the pool is the emulated arena; on a device the tuple is the allocator's
            # own pool id, which the graph captures into.
            handle = (
                graph_pool_handle("cpu") if device.type == "cpu" else PoolHandle(device, pool_id)
            )
            _pools[key] = handle
    return handle
