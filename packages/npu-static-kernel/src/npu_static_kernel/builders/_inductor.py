"""Inductor builder: the graph compiled by TorchInductor for exactly the recorded static shapes."""

from __future__ import annotations

import atexit
import contextlib
import copy
import inspect
import json
import os
import shlex
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch

from npu_static_kernel._cache import META, file_digest, safe_relative
from npu_static_kernel._interface import BuildRequest, StaticKernelBuilder
from npu_static_kernel.errors import BuildError, CacheError

__all__ = ["InductorBuilder"]

_ARTIFACT = "inductor_artifact.bin"
# Inductor's cache directory as the build left it: generated code and the compiled kernels
# (``.so`` on CPU). Loading with it skips every C++/Triton compile on a machine whose own
# Inductor cache is empty; the binary artifact alone only carries the graph-level cache entries.
_BUNDLE = "inductor_cache"
# Inductor writes these while it works; they are not part of the artifact.
_BUNDLE_SKIP = ("locks",)

# The build's vector-ISA decisions (CPU only); see _built_isa.
_ISA = "inductor_cpu_isa.json"

_load_root: Path | None = None
_load_root_lock = threading.Lock()


def _standalone_compile_options(compile_fn: Callable[..., Any]) -> dict[str, Any]:
    """Keyword arguments this torch's ``standalone_compile`` accepts beyond the common ones.

    ``donate_graph_module`` (skip Inductor's copy of the graph, which is ours to give away)
    appeared in torch 2.13; torch 2.11 rejects the keyword.
    """
    try:
        parameters = inspect.signature(compile_fn).parameters
    except (TypeError, ValueError):
        return {}
    return {"donate_graph_module": True} if "donate_graph_module" in parameters else {}


def _cache_dir_context() -> Callable[[str], contextlib.AbstractContextManager[Any]] | None:
    """Inductor's ``temporary_cache_dir`` if this torch has it (None: build without a bundle)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
    except ImportError:
        return None
    return temporary_cache_dir


def _one_argument(path: str) -> bool:
    """Whether ``path`` stays one argument in a command line split like a shell's.

    Inductor's C++ builder joins the source and output paths into one command string unquoted
    and splits it again with ``shlex`` (torch/_inductor/cpp_builder.py, ``_run_compile_cmd``):
    a space or a quote in the path cuts it in two and every compile fails. Non-ASCII letters
    are fine.
    """
    try:
        return shlex.split(f"x {path} y") == ["x", path, "y"]
    except ValueError:  # an unbalanced quote
        return False


def _scratch_root() -> Path:
    """A writable temporary directory whose path survives Inductor's command line."""
    candidates = [tempfile.gettempdir(), "/tmp", "/var/tmp"]
    for candidate in dict.fromkeys(candidates):
        if _one_argument(candidate) and os.path.isdir(candidate) and os.access(candidate, os.W_OK):
            return Path(candidate)
    raise BuildError(
        f"the build directory's path has spaces or quotes, which Inductor's C++ compile command "
        f"cannot hold, and no temporary directory without them was found ({candidates}); set "
        "TMPDIR to a writable directory whose path has no spaces or quotes"
    )


@contextlib.contextmanager
def _compile_dir(bundle: Path) -> Iterator[Path]:
    """The Inductor cache directory to compile in; its files end up in ``bundle``.

    ``bundle`` itself when its path survives Inductor's command line; otherwise (a build
    directory such as ``~/my models/``) a private scratch directory in the temporary directory,
    whose files are copied into ``bundle`` after the compile. The artifact does not record where
    it was compiled (a load uses a copy in another place anyway), so both give the same files.
    """
    if _one_argument(str(bundle.absolute())):
        yield bundle
        return
    scratch = Path(tempfile.mkdtemp(prefix="npu-static-kernel-build-", dir=_scratch_root()))
    try:
        where = scratch / _BUNDLE
        yield where
        if where.is_dir():
            shutil.copytree(where, bundle, symlinks=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _private_load_dir() -> Path:
    """A fresh directory for one load, under a per-process root removed at exit."""
    global _load_root
    with _load_root_lock:
        if _load_root is None:
            _load_root = Path(tempfile.mkdtemp(prefix="npu-static-kernel-inductor-"))
            atexit.register(shutil.rmtree, _load_root, True)
        return Path(tempfile.mkdtemp(dir=_load_root))


def _copy_bundle(artifact_dir: Path, target: Path) -> None:
    """Copy the verified bundle files (those listed in meta.json) into ``target``.

    Only listed files are copied and each copy is hashed again, so nothing planted next to the
    artifact or changed after verification reaches Inductor's cache.
    """
    meta = json.loads((artifact_dir / META).read_text(encoding="utf-8"))
    files = meta.get("files", {}) if isinstance(meta, dict) else {}
    for name, expected in files.items():
        relative = safe_relative(name)
        if relative is None or relative.parts[0] != _BUNDLE or len(relative.parts) < 2:
            continue
        destination = target.joinpath(*relative.parts[1:])
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(artifact_dir / relative, destination)
        if file_digest(destination) != (expected.get("sha256"), expected.get("size")):
            raise CacheError(f"{name} changed while the artifact was loaded")


def _read_isa(artifact_dir: Path) -> dict[str, object]:
    """The build's ISA choice (verified with the artifact's other files), ``{}`` if absent."""
    try:
        data = json.loads((artifact_dir / _ISA).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, (str, bool))}


def _built_isa() -> dict[str, object]:
    """The vector ISA Inductor picked for this build (kept with the artifact).

    Inductor names a compiled C++ kernel by a key that includes the ISA's compiler flags, and
    which ISA (AVX-512 with VNNI or not, with BF16 or not) is decided by compiling test programs:
    a load must reuse the build's choice, not probe again, or the key (and so the bundled kernel)
    is missed.
    """
    try:
        from torch._inductor import cpu_vec_isa

        isa = cpu_vec_isa.pick_vec_isa()
    except Exception:
        return {}
    picked: dict[str, object] = {"isa": str(isa)}
    bf16 = getattr(isa, "_is_avx512_bf16_supported", None)
    if isinstance(bf16, bool):
        picked["avx512_bf16"] = bf16
    return picked


def _the_built_isa(cpu_vec_isa: Any, built: Mapping[str, object]) -> Any:
    """A copy of the ISA the build picked, if this CPU advertises it (else None: probe)."""
    name = built.get("isa")
    if not isinstance(name, str) or not name:
        return None
    for isa in getattr(cpu_vec_isa, "supported_vec_isa_list", ()):
        if str(isa) == name:
            break
    else:
        return None
    checker = getattr(cpu_vec_isa, "x86_isa_checker", None)
    if callable(checker) and str(isa).startswith("avx"):
        advertised = set(checker())
        if not all(flag in advertised for flag in str(isa).split()):
            return None
    chosen = copy.copy(isa)  # never change Inductor's own instances
    bf16 = built.get("avx512_bf16")
    if isinstance(bf16, bool) and hasattr(chosen, "_is_avx512_bf16_supported"):
        chosen._is_avx512_bf16_supported = bf16
    return chosen


@contextlib.contextmanager
def _trust_the_bundled_isa(built: Mapping[str, object] | None = None) -> Iterator[None]:
    """Load bundled C++ kernels without compiling anything.

    Before it loads a C++ kernel, Inductor (1) picks the vector ISA by compiling a test program
    per candidate and loading each in a new Python process, and (2) precompiles the C++ headers.
    Both run the C++ compiler: about a second per load, and where it cannot compile (a serving
    image) the probe's answer, and so the kernel key, differs from the build's and the load
    fails. (Inductor still asks the compiler for its version: its name is part of the key.)

    So, in the loading thread only and for this load only, the ISA is the build's (``built``,
    from :func:`_built_isa`) and no header is precompiled: the header only serves a compile, and
    a bundled kernel needs none (a missing one fails to compile and the artifact is rebuilt).
    Without a recorded ISA, or on a CPU that does not advertise it, Inductor probes as usual.
    Nothing is kept, and a compile in another thread meanwhile gets Inductor's own answers.
    """
    try:
        from torch._inductor import codecache, cpu_vec_isa
    except ImportError:
        yield
        return
    chosen = _the_built_isa(cpu_vec_isa, built or {})
    if chosen is None:
        yield
        return
    loader = threading.get_ident()

    def in_this_load(original: Callable[..., Any], answer: Callable[[], Any]) -> Callable[..., Any]:
        def replacement(*args: Any, **kwargs: Any) -> Any:
            return answer() if threading.get_ident() == loader else original(*args, **kwargs)

        return replacement

    # Module globals of Inductor, each replaced only where this torch has it.
    replaced: list[tuple[object, str, Callable[..., Any]]] = []
    for module in (cpu_vec_isa, codecache):
        if callable(original := getattr(module, "pick_vec_isa", None)):
            replaced.append((module, "pick_vec_isa", in_this_load(original, lambda: chosen)))
    if callable(original := getattr(codecache, "_precompile_header", None)):
        no_header = in_this_load(original, lambda: os.devnull)
        replaced.append((codecache, "_precompile_header", no_header))
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in replaced]
    try:
        for owner, name, value in replaced:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


class InductorBuilder(StaticKernelBuilder):
    """Compile the FX graph with ``torch._inductor.standalone_compile`` for static shapes.

    The compiled graph is saved with ``CompiledArtifact.save(format="binary")`` together with
    the Inductor cache files the compile produced (generated code, compiled C++ or Triton
    kernels), and loaded back with ``CompiledArtifact.load`` against a private copy of those
    files. A second process, on any machine with the same torch and device, skips compilation
    even with an empty Inductor cache. Works on CUDA (Triton kernels) and CPU (C++ kernels, needs
    a C++ compiler for the build); graph inputs mutated by ``aten.copy_`` are still written by
    the compiled code.

    Args:
        options: Inductor options passed to ``standalone_compile`` (for example
            ``{"max_autotune": True}``); they are part of the cache key.
    """

    name: ClassVar[str] = "inductor"

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = dict(options or {})

    def compute_hash(self) -> str:
        """Return the Inductor options (sorted JSON) so other options never share an artifact."""
        return json.dumps(self.options, sort_keys=True, default=str)

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        """Compile ``request.gm`` for the shapes of ``request.args`` and save it in ``out_dir``."""
        import torch._inductor as inductor

        compile_fn = inductor.standalone_compile
        cache_dir = _cache_dir_context()
        bundle = out_dir / _BUNDLE
        try:
            portable, constants = _portable_copy(request.gm)
            # Compile against an Inductor cache inside the artifact, so every file the compile
            # produces (generated code, compiled kernels) travels with it.
            with _compile_dir(bundle) as where:
                with cache_dir(str(where)) if cache_dir is not None else contextlib.nullcontext():
                    artifact = compile_fn(
                        portable,
                        [*request.args, *(_constant_values(request.gm, constants))],
                        dynamic_shapes="from_example_inputs",
                        options=dict(self.options),
                        **_standalone_compile_options(compile_fn),
                    )
                    artifact.save(path=str(out_dir / _ARTIFACT), format="binary")
                for name in _BUNDLE_SKIP:
                    shutil.rmtree(where / name, ignore_errors=True)
            if cache_dir is not None and request.device_type == "cpu":
                # Only a bundle's load skips the ISA probe, and it needs the build's answers.
                (out_dir / _ISA).write_text(json.dumps(_built_isa()), encoding="utf-8")
        except BuildError:
            raise
        except Exception as exc:
            raise BuildError(
                f"Inductor could not compile the graph for static shapes ({type(exc).__name__}: "
                f"{exc}); run the graph without static kernels, or report the graph "
                "(gm.print_readable()) with the error"
            ) from exc

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        """Load the saved artifact and adapt its outputs to ``gm.forward``'s output structure."""
        from torch._inductor.standalone_compile import CompiledArtifact

        path = artifact_dir / _ARTIFACT
        cache_dir = _cache_dir_context()
        try:
            if cache_dir is not None and (artifact_dir / _BUNDLE).is_dir():
                # A private, writable copy: the artifact may be read-only or shared, and Inductor
                # writes locks and cache entries while it loads.
                private = _private_load_dir()
                _copy_bundle(artifact_dir, private)
                with cache_dir(str(private)), _trust_the_bundled_isa(_read_isa(artifact_dir)):
                    artifact = CompiledArtifact.load(path=str(path), format="binary")
            else:
                artifact = CompiledArtifact.load(path=str(path), format="binary")
        except Exception as exc:
            raise CacheError(
                f"cannot load the Inductor artifact {path} ({type(exc).__name__}: {exc}); "
                f"remove it with `npu-static-kernel clean --key {request.key}` and run again"
            ) from exc
        constants = _constant_values(request.gm, _tensor_constants(request.gm))
        return _OutputAdapter(artifact, _output_kind(request.gm), constants)


def _portable_copy(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[str]]:
    """Copy ``gm`` for ``standalone_compile``: tensor constants lifted to inputs, no type notes.

    Tensor attributes (``get_attr``: the ``_tensor_constant0`` of a literal, buffers) become
    trailing placeholders. Left as attributes, Inductor lifts them into inputs of the compiled
    code too, but a saved and loaded ``CompiledArtifact`` no longer knows their values and fails
    with too few arguments; passed explicitly, the loaded artifact gets them on every call.
    Graphs from ``make_fx`` annotate the return type with generated names that Inductor cannot
    serialise into an artifact; the annotations carry no information the compiler needs.

    Returns:
        The copy, and the attribute names of the lifted constants, in placeholder order.
    """
    graph = torch.fx.Graph()
    remap: dict[torch.fx.Node, torch.fx.Node] = {}
    nodes = list(gm.graph.nodes)
    for node in nodes:
        if node.op == "placeholder":
            remap[node] = graph.node_copy(node, lambda n: remap[n])
    constants = _tensor_constants(gm)
    lifted = {
        target: graph.placeholder(f"_static_kernel_constant_{i}")
        for i, target in enumerate(constants)
    }
    for node in nodes:
        if node.op == "get_attr" and str(node.target) in lifted:
            remap[node] = lifted[str(node.target)]
    for node in nodes:
        if node not in remap:
            remap[node] = graph.node_copy(node, lambda n: remap[n])
    for node in graph.nodes:
        node.type = None
    return torch.fx.GraphModule(gm, graph), constants


def _tensor_constants(gm: torch.fx.GraphModule) -> list[str]:
    """Attribute names of the tensors ``gm`` reads with ``get_attr``, in first-use order."""
    found: dict[str, None] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr" and isinstance(_attribute(gm, str(node.target)), torch.Tensor):
            found[str(node.target)] = None
    return list(found)


def _attribute(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


def _constant_values(gm: torch.fx.GraphModule, targets: list[str]) -> tuple[torch.Tensor, ...]:
    return tuple(_attribute(gm, target) for target in targets)


def _output_kind(gm: torch.fx.GraphModule) -> str:
    """How ``gm.forward`` packs its outputs: ``"tuple"``, ``"list"`` or ``"single"``."""
    for node in gm.graph.nodes:
        if node.op == "output":
            result = node.args[0]
            if isinstance(result, tuple):
                return "tuple"
            if isinstance(result, list):
                return "list"
            return "single"
    return "tuple"


class _OutputAdapter:
    """Call a compiled artifact and return outputs packed exactly like ``gm.forward``'s."""

    def __init__(
        self, compiled: Callable[..., Any], kind: str, constants: tuple[torch.Tensor, ...] = ()
    ) -> None:
        self._compiled = compiled
        self._kind = kind
        self._constants = constants

    def __call__(self, *args: Any) -> Any:
        out = self._compiled(*args, *self._constants)
        if self._kind == "single":
            return out[0] if isinstance(out, (list, tuple)) and len(out) == 1 else out
        if self._kind == "tuple" and not isinstance(out, tuple):
            return tuple(out)
        if self._kind == "list" and not isinstance(out, list):
            return list(out)
        return out
