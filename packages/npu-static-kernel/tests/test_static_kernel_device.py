"""Device fingerprints: the host formula is pinned, accelerators go through torch's device API."""

from __future__ import annotations

import hashlib
import json
import platform
import struct
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import npu_static_kernel
import pytest
import torch
from npu_static_kernel import BuildRequest, StaticKernelBuilder, compute_key
from npu_static_kernel._device import device_fingerprint

HOST = f"{platform.machine()}:{torch.backends.cpu.get_cpu_capability()}"


class NamedBuilder(StaticKernelBuilder):
    name = "device-named"

    def compute_hash(self) -> str:
        return "settings-v1"

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        raise AssertionError("keys only")

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        raise AssertionError("keys only")


class Scaled(torch.nn.Module):
    scale: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor([2.0]))

    def forward(self, x: torch.Tensor, n: int) -> tuple[torch.Tensor]:
        return (torch.ops.aten.mul.Tensor(x * self.scale, n),)


def _fake_device(
    monkeypatch: pytest.MonkeyPatch, device_type: str, module: types.SimpleNamespace
) -> None:
    """Make ``torch.get_device_module(device_type)`` answer ``module``."""
    real = torch.get_device_module

    def get_device_module(device: Any = None) -> Any:
        return module if device == device_type else real(device)

    monkeypatch.setattr(torch, "get_device_module", get_device_module)


def _accelerator(**queries: Any) -> types.SimpleNamespace:
    functions = {name: (lambda value=value: value) for name, value in queries.items()}
    return types.SimpleNamespace(is_available=lambda: True, **functions)


def test_the_cpu_fingerprint_is_the_machine_and_its_vector_isa() -> None:
    # Part of every CPU cache key: a change would make every artifact on disk miss.
    assert device_fingerprint("cpu") == f"cpu:{HOST}"
    # A type torch has no module for is described like the host, under its own name.
    assert device_fingerprint("meta") == f"meta:{HOST}"


def test_a_cpu_cache_key_keeps_its_formula() -> None:
    # The key of existing CPU artifacts, computed here from its documented parts.
    gm = torch.fx.symbolic_trace(Scaled())
    args = [torch.ones(3), 4]
    document = {
        "graph": gm.code,
        "constants": [["scale", "float32[1]", hashlib.sha256(struct.pack("=f", 2.0)).hexdigest()]],
        "inputs": [["torch.float32", [3], [1], "cpu"], ["int", "4"]],
        "torch": torch.__version__,
        "package": npu_static_kernel.__version__,
        "device": f"cpu:{HOST}",
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "cpu_threads": torch.get_num_threads(),
        "builder": "device-named",
        "builder_hash": "settings-v1",
    }
    expected = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
    assert compute_key(gm, args, NamedBuilder()) == expected


def test_a_new_accelerator_is_described_through_its_device_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = _accelerator(get_device_name="Fake Chip 9", get_device_capability=(9, 1))
    _fake_device(monkeypatch, "fakeacc", module)
    monkeypatch.setattr(torch.version, "fakeacc", "4.2", raising=False)
    assert device_fingerprint("fakeacc") == "fakeacc:Fake Chip 9:sm91:fakeacc4.2"
    # Another chip of the same type is another fingerprint, so another key.
    module.get_device_name = lambda: "Fake Chip 10"
    assert device_fingerprint("fakeacc") == "fakeacc:Fake Chip 10:sm91:fakeacc4.2"


def test_an_accelerator_without_capability_or_version_gives_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_device(monkeypatch, "fakeacc", _accelerator(get_device_name="Fake Chip 9"))
    assert device_fingerprint("fakeacc") == "fakeacc:Fake Chip 9"


def test_a_capability_that_is_not_a_pair_is_digested(monkeypatch: pytest.MonkeyPatch) -> None:
    # XPU answers a dict of properties: the fingerprint stays short and tells chips apart.
    module = _accelerator(get_device_name="Fake GPU", get_device_capability={"eus": 512})
    _fake_device(monkeypatch, "fakeacc", module)
    first = device_fingerprint("fakeacc")
    assert first.startswith("fakeacc:Fake GPU:cap")
    assert len(first) < 40
    assert device_fingerprint("fakeacc") == first
    module.get_device_capability = lambda: {"eus": 448}
    assert device_fingerprint("fakeacc") not in (first, f"fakeacc:{HOST}")


def test_an_unavailable_or_unnamed_accelerator_is_described_like_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = _accelerator(get_device_name="Fake Chip 9")
    module.is_available = lambda: False
    _fake_device(monkeypatch, "fakeacc", module)
    assert device_fingerprint("fakeacc") == f"fakeacc:{HOST}"
    _fake_device(monkeypatch, "fakeacc", types.SimpleNamespace(is_available=lambda: True))
    assert device_fingerprint("fakeacc") == f"fakeacc:{HOST}"


def test_a_runtime_that_cannot_name_its_device_says_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken() -> str:
        raise RuntimeError("driver not loaded")

    module = _accelerator(get_device_capability=(8, 0))
    module.get_device_name = broken
    _fake_device(monkeypatch, "fakeacc", module)
    assert device_fingerprint("fakeacc") == "fakeacc:unknown:sm80"


def test_cuda_keeps_its_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _accelerator(get_device_name="NVIDIA H100", get_device_capability=(9, 0))
    _fake_device(monkeypatch, "cuda", module)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    major, minor = module.get_device_capability()
    # The formula CUDA artifacts were keyed with.
    old = f"cuda:{module.get_device_name()}:sm{major}{minor}:cuda{torch.version.cuda}"
    assert device_fingerprint("cuda") == old


def test_npu_is_its_soc_name_after_torch_npu_registers_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    imported: list[str] = []

    def registers(name: str) -> types.ModuleType:
        imported.append(name)
        return types.ModuleType(name)

    # torch_npu's get_device_capability() is a stand-in (set by an environment variable), and
    # torch.version could one day name npu: neither may enter the fingerprint.
    module = _accelerator(get_device_name="Ascend910B3", get_device_capability=(8, 0))
    _fake_device(monkeypatch, "npu", module)
    monkeypatch.setattr(torch.version, "npu", "2.9", raising=False)
    monkeypatch.setattr("importlib.import_module", registers)
    assert device_fingerprint("npu") == "npu:Ascend910B3"
    assert imported == ["torch_npu"]


def test_npu_without_a_usable_torch_npu_is_described_like_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules makes `import torch_npu` fail, as on a machine without it.
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    assert device_fingerprint("npu") == f"npu:{HOST}"
