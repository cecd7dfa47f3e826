"""The private torch APIs npu_static_kernel relies on, checked against the installed torch.

torch may move any of these in a minor release without notice. The tests below resolve every entry
on the installed torch and fail naming the one that moved, and scan the package's sources so that
a private torch name used there but missing from this list fails too. Checking a new torch release
is then this list, run through ``nox -s compat`` (docs/torch-compat.md). The list lives with the
tests, the only code that reads it, so it does not ship in the wheel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import npu_static_kernel
import pytest
from private_api import PrivateApi


def _standalone_compile_donates() -> object:
    """``standalone_compile``'s ``donate_graph_module`` keyword (raises where it is missing)."""
    import inspect

    import torch._inductor as inductor

    parameters = inspect.signature(inductor.standalone_compile).parameters
    return parameters["donate_graph_module"]


PRIVATE_APIS: tuple[PrivateApi, ...] = (
    PrivateApi(
        "torch._inductor.standalone_compile",
        "Inductor",
        "builders/_inductor.py compiles a graph for its recorded static shapes",
    ),
    PrivateApi(
        "torch._inductor.standalone_compile.CompiledArtifact.save",
        "Inductor",
        "builders/_inductor.py saves the compiled graph into the artifact (format='binary')",
    ),
    PrivateApi(
        "torch._inductor.standalone_compile.CompiledArtifact.load",
        "Inductor",
        "builders/_inductor.py loads an artifact in a second process",
    ),
    PrivateApi(
        "torch._inductor.standalone_compile.donate_graph_module",
        "Inductor",
        "builders/_inductor.py lets Inductor skip its copy of a graph that is ours to give away",
        optional="Inductor copies each graph before compiling it (torch 2.11 has no keyword)",
        probe=_standalone_compile_donates,
    ),
    PrivateApi(
        "torch._inductor.runtime.cache_dir_utils.temporary_cache_dir",
        "Inductor",
        "builders/_inductor.py points Inductor's cache into the artifact, so generated code and "
        "compiled kernels travel with it",
        optional="artifacts carry no kernels: a load on a machine with an empty Inductor cache "
        "compiles them again",
    ),
    PrivateApi(
        "torch._inductor.cpu_vec_isa.pick_vec_isa",
        "Inductor",
        "builders/_inductor.py records the build's vector ISA and answers it at load time",
        optional="a load probes the ISA again (compiles test programs) instead of trusting the "
        "build's",
    ),
    PrivateApi(
        "torch._inductor.cpu_vec_isa.supported_vec_isa_list",
        "Inductor",
        "builders/_inductor.py finds the ISA object the build recorded",
        optional="a load probes the ISA again instead of trusting the build's",
    ),
    PrivateApi(
        "torch._inductor.cpu_vec_isa.x86_isa_checker",
        "Inductor",
        "builders/_inductor.py checks that this CPU advertises the build's ISA",
        optional="the recorded ISA is trusted without asking the CPU",
    ),
    PrivateApi(
        "torch._inductor.cpu_vec_isa.VecAVX512._is_avx512_bf16_supported",
        "Inductor",
        "builders/_inductor.py records whether the build's AVX-512 ISA had BF16",
        optional="the BF16 answer is probed again at load time",
    ),
    PrivateApi(
        "torch._inductor.codecache.pick_vec_isa",
        "Inductor",
        "builders/_inductor.py answers the build's ISA where Inductor's code cache asks",
        optional="a load probes the ISA again instead of trusting the build's",
    ),
    PrivateApi(
        "torch._inductor.codecache._precompile_header",
        "Inductor",
        "builders/_inductor.py skips the header precompile when a load compiles nothing",
        optional="each load precompiles C++ headers (about a second, and needs a compiler)",
    ),
    PrivateApi(
        "torch._dynamo.convert_frame.compile_lock",
        "Dynamo",
        "_threads.py builds under the lock Dynamo compiles under (tracing is process-wide)",
        optional="a build in one thread may trace while Dynamo compiles in another",
    ),
    PrivateApi(
        "torch.utils._python_dispatch.TorchDispatchMode",
        "dispatch",
        "_record.OpStatisticsRecorder sees every ATen op a graph runs",
    ),
)


PACKAGE_DIR = Path(npu_static_kernel.__file__).parent


@pytest.mark.parametrize("api", PRIVATE_APIS, ids=lambda api: api.name)
def test_private_torch_api_exists(api: PrivateApi, private_torch_apis: Any) -> None:
    private_torch_apis.check(api, "npu_static_kernel")


def test_every_private_torch_name_used_is_listed(private_torch_apis: Any) -> None:
    unlisted = private_torch_apis.unlisted(PACKAGE_DIR, PRIVATE_APIS)
    assert not unlisted, f"add to PRIVATE_APIS above: {', '.join(unlisted)}"


def test_every_listed_name_is_used(private_torch_apis: Any) -> None:
    unused = private_torch_apis.unused(PACKAGE_DIR, PRIVATE_APIS)
    assert not unused, f"remove from PRIVATE_APIS above: {', '.join(unused)}"
