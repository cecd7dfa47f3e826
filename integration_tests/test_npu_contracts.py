"""The NPU contract check: its inventory against our sources, and the checker on tiny fake wheels.

``.ci/check_npu_contracts.py`` reads real torch_npu and vllm-ascend wheels in ``nox -s
npu_contracts``; here it reads archives built in a temporary directory, so nothing needs the
network. The inventory tests scan the packages' sources, like each package's
``test_*_torch_private.py`` does for private torch names.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(ROOT.glob("packages/*/src"))


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_npu_contracts", ROOT / ".ci" / "check_npu_contracts.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up while the class is made.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


checker = _load_checker()
ENTRIES = checker.load_inventory()


def _module_path(module: str) -> Path | None:
    relative = Path(*module.split("."))
    for src in SOURCES:
        for path in (src / relative.with_suffix(".py"), src / relative / "__init__.py"):
            if path.is_file():
                return path
    return None


# --- the inventory against our sources


def test_every_npu_name_our_sources_use_is_listed_with_its_module() -> None:
    users = {entry.name: set(entry.users) for entry in ENTRIES}
    missing = []
    for src in SOURCES:
        for path in sorted(src.rglob("*.py")):
            module = ".".join(path.relative_to(src).with_suffix("").parts)
            module = module.removesuffix(".__init__")
            for name, line in checker.npu_names_used(path.read_text(encoding="utf-8")).items():
                if module not in users.get(name, set()):
                    missing.append(f"{name} ({path.relative_to(ROOT)}:{line})")
    assert not missing, f"add to .ci/npu_contracts.toml (name and users): {', '.join(missing)}"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry.name)
def test_every_listed_user_exists_and_mentions_the_name(entry: Any) -> None:
    last = entry.name.rsplit(".", 1)[-1]
    for user in entry.users:
        path = _module_path(user)
        assert path is not None, f"{entry.name}: no module {user} under packages/*/src"
        assert last in path.read_text(encoding="utf-8"), (
            f"{entry.name}: {user} no longer mentions {last}; update .ci/npu_contracts.toml"
        )


def test_every_call_in_the_inventory_parses() -> None:
    for entry in ENTRIES:
        for call in entry.calls:
            checker.parse_call(call)


def test_the_ascend_platform_overrides_exactly_what_the_inventory_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from npu_compile.vllm import _platforms

    class NPUPlatform:
        pass

    package = ModuleType("vllm_ascend")
    platform = ModuleType("vllm_ascend.platform")
    platform.NPUPlatform = NPUPlatform  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm_ascend", package)
    monkeypatch.setitem(sys.modules, "vllm_ascend.platform", platform)
    monkeypatch.setattr(_platforms, "_built", {})
    built = _platforms.NpuCompileAscendPlatform
    overridden = {
        name
        for name, value in vars(built).items()
        if isinstance(value, classmethod | staticmethod) or callable(value)
    }
    listed = {
        entry.name.rsplit(".", 1)[-1]
        for entry in ENTRIES
        if entry.override and entry.name.startswith("vllm_ascend.platform.NPUPlatform.")
    }
    assert overridden == listed


def test_the_scan_follows_helpers_locals_getattr_and_strings() -> None:
    source = '''
"""torch_npu.docstring_only is prose."""
import importlib
import torch

def _torch_npu():
    return importlib.import_module("torch_npu")

def f(x):
    npu = _torch_npu()
    c = getattr(npu, "_C", None)
    hasattr(c, "_npu_probe")
    for hook in ("_npu_a", "_npu_b"):
        getattr(getattr(npu, "_C", None), hook, None)
    _torch_npu().npu.Stream(device=x)
    torch.npu.get_device_name()
    versions = {"torch_npu.not_a_use": 1}
    versions["torch_npu.key"]
    f"torch_npu.in_fstring {x}"
    return ("vllm_ascend.platform", "NPUPlatform"), importlib.util.find_spec("vllm_ascend.x")
'''
    assert set(checker.npu_names_used(source)) == {
        "torch_npu._C._npu_probe",
        "torch_npu._C._npu_a",
        "torch_npu._C._npu_b",
        "torch_npu.npu.Stream",
        "torch.npu.get_device_name",
        "vllm_ascend.platform.NPUPlatform",
        "vllm_ascend.x",
    }


# --- the checker on fake archives

ELF = b"\x7fELF\x00"

TORCH_NPU: dict[str, str | bytes] = {
    "torch_npu-9.9.0.dist-info/METADATA": "Name: torch_npu\nVersion: 9.9.0\n",
    "torch_npu/__init__.py": "from torch_npu._init import register\nregister()\n",
    "torch_npu/_init.py": (
        "import torch\nimport torch_npu\n\n\n"
        "def register():\n    torch._register_device_module('npu', torch_npu.npu)\n"
    ),
    "torch_npu/npu/__init__.py": (
        "from .graphs import *\n"
        "from .streams import Stream\n"
        "from torch_npu._C import _graph_pool_handle as graph_pool_handle\n\n\n"
        "def synchronize(device=None): ...\n\n\n"
        "def __getattr__(name):\n"
        "    if name == 'npugraph_ex':\n        return 1\n"
        "    raise AttributeError(name)\n"
    ),
    "torch_npu/npu/graphs.py": (
        "import torch_npu\n\n__all__ = ['NPUGraph', 'graph']\n\n\n"
        "class NPUGraph(torch_npu._C._NPUGraph):\n    def replay(self): ...\n\n\n"
        "class graph:\n    def __init__(self, npu_graph, pool=None, stream=None): ...\n\n\n"
        "def _hidden(): ...\n"
    ),
    "torch_npu/npu/streams.py": (
        "class Stream:\n    def __new__(cls, device=None, priority=0, **kwargs): ...\n"
    ),
    "torch_npu/npu/_graph_tree.py": (
        "import torch_npu\n\ntorch_npu._C._npu_getCheckpointState(0, (1, 2))\n"
    ),
    "torch_npu/csrc/aten/npu_native_functions.yaml": (
        "  - func: get_npu_format(Tensor self) -> int\n"
    ),
    "torch_npu/_C.cpython-311-x86_64-linux-gnu.so": ELF
    + b"_graph_pool_handle\x00_NPUGraph\x00reset\x00"
    + b"_npu_getCheckpointState\x00_npu_setCheckpointPoolState\x00",
}

VLLM_ASCEND: dict[str, str | bytes] = {
    "PKG-INFO": "Name: vllm-ascend\nVersion: 9.9.0\n",
    "vllm_ascend/__init__.py": "",
    "vllm_ascend/platform.py": (
        "from vllm.platforms import Platform\n\n\n"
        "class NPUPlatform(Platform):\n"
        "    @classmethod\n    def get_compile_backend(cls) -> str: ...\n\n"
        "    @classmethod\n    def get_static_graph_wrapper_cls(cls, extra) -> str: ...\n"
    ),
}


def _wheel(tmp_path: Path, files: dict[str, str | bytes], name: str = "torch_npu") -> Path:
    path = tmp_path / f"{name}-9.9.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in files.items():
            zf.writestr(member, data)
    return path


def _sdist(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    path = tmp_path / "vllm_ascend-9.9.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for member, data in files.items():
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(f"vllm_ascend-9.9.0/{member}")
            info.size = len(raw)
            tf.addfile(info, io.BytesIO(raw))
    return path


def _inventory(tmp_path: Path, *entries: str) -> Path:
    path = tmp_path / "inventory.toml"
    blocks = [f'[[api]]\nusers = ["tests"]\nuse = "test"\n{entry.strip()}\n' for entry in entries]
    path.write_text("\n".join(blocks))
    return path


def _check(tmp_path: Path, archives: list[Path], *entries: str) -> tuple[int, dict[str, str]]:
    inventory = _inventory(tmp_path, *entries)
    results, _summary = checker.run(archives, inventory)
    code = checker.main([*map(str, archives), "--inventory", str(inventory)])
    return code, {r.name: f"{r.status} {r.detail}" for r in results}


@pytest.fixture
def archives(tmp_path: Path) -> list[Path]:
    return [_wheel(tmp_path, TORCH_NPU), _sdist(tmp_path, VLLM_ASCEND)]


def test_names_that_exist_with_our_calls_are_ok(
    tmp_path: Path, archives: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _check(
        tmp_path,
        archives,
        'name = "torch_npu"',
        'name = "torch.npu"',
        'name = "torch.npu.synchronize"\ncalls = ["(device)"]',
        'name = "torch_npu.npu.Stream"\ncalls = ["(device=device)", "(device, priority=p)"]',
        'name = "torch_npu.npu.NPUGraph.replay"\ncalls = ["()"]',
        'name = "torch_npu.npu.graph"\ncalls = ["(graph, pool=pool_id, stream=stream)"]',
        'name = "torch_npu.npu.npugraph_ex"',
        'name = "torch_npu.get_npu_format"\nop = "npu::get_npu_format"\ncalls = ["(tensor)"]',
        'name = "vllm_ascend.platform.NPUPlatform.get_compile_backend"\n'
        'override = "(cls)"\ndecorator = "classmethod"',
    )
    assert code == 0
    assert all(line.startswith("ok ") for line in lines.values()), lines
    assert "registered at torch_npu/_init.py:6" in lines["torch.npu"]
    assert "torch_npu/npu/streams.py:1 class Stream" in lines["torch_npu.npu.Stream"]
    assert "torch_npu/npu/graphs.py" in lines["torch_npu.npu.NPUGraph.replay"]
    assert "module __getattr__" in lines["torch_npu.npu.npugraph_ex"]
    assert "npu_native_functions.yaml:1" in lines["torch_npu.get_npu_format"]
    out = capsys.readouterr().out
    assert "9 names checked against torch_npu 9.9.0, vllm-ascend 9.9.0: 9 ok, 0 MOVED" in out


def test_a_moved_name_fails_naming_it_and_where_it_looked(
    tmp_path: Path, archives: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _check(
        tmp_path,
        archives,
        'name = "torch_npu.npu.gone"',
        'name = "torch_npu.npu._hidden"',  # graphs.py has it, but its __all__ does not export it
        'name = "torch_npu.npu.NPUGraph.capture_begin"',
        'name = "torch_npu.elsewhere.thing"\noptional = "nothing much is lost"',
    )
    assert code == 1
    assert lines["torch_npu.npu.gone"].startswith("MOVED looked in torch_npu/npu/__init__.py")
    assert "torch_npu/npu/graphs.py" in lines["torch_npu.npu.gone"]
    assert lines["torch_npu.npu._hidden"].startswith("MOVED")
    capture_begin = lines["torch_npu.npu.NPUGraph.capture_begin"]
    assert capture_begin.startswith("MOVED")
    assert "NPUGraph has the C base torch_npu._C._NPUGraph" in capture_begin
    assert "without it nothing much is lost" in lines["torch_npu.elsewhere.thing"]
    assert "MOVED        torch_npu.npu.gone: looked in" in capsys.readouterr().out


def test_calls_that_no_longer_bind_are_changed(tmp_path: Path, archives: list[Path]) -> None:
    code, lines = _check(
        tmp_path,
        archives,
        'name = "torch_npu.npu.graph"\ncalls = ["(graph, pool=p, capture_error_mode=m)"]',
        'name = "torch.npu.synchronize"\ncalls = ["(device, True)"]',
        'name = "torch_npu.npu.NPUGraph"\ncalls = ["()"]',  # no Python constructor: unchecked
        'name = "torch_npu.get_npu_format"\nop = "npu::get_npu_format"\ncalls = ["(t, 3)"]',
        'name = "torch_npu.npu.Stream"\ncalls = ["(device, priority=p, anything=1)"]',
    )
    assert code == 1
    assert "has no parameter capture_error_mode" in lines["torch_npu.npu.graph"]
    assert lines["torch_npu.npu.graph"].startswith("CHANGED")
    assert "takes 1 positional argument(s), we pass 2" in lines["torch.npu.synchronize"]
    assert lines["torch_npu.get_npu_format"].startswith("CHANGED")
    assert lines["torch_npu.npu.NPUGraph"].startswith("ok")
    assert "parameters unchecked" in lines["torch_npu.npu.NPUGraph"]
    assert lines["torch_npu.npu.Stream"].startswith("ok")  # **kwargs takes anything


def test_an_override_whose_base_method_changed(tmp_path: Path, archives: list[Path]) -> None:
    code, lines = _check(
        tmp_path,
        archives,
        'name = "vllm_ascend.platform.NPUPlatform.get_static_graph_wrapper_cls"\n'
        'override = "(cls)"\ndecorator = "classmethod"',
        'name = "vllm_ascend.platform.NPUPlatform.get_compile_backend"\n'
        'override = "()"\ndecorator = "staticmethod"',
        'name = "vllm_ascend.platform.NPUPlatform.check_and_update_config"\n'
        'override = "(cls, vllm_config)"\ndecorator = "classmethod"',
    )
    assert code == 1
    wrapper = lines["vllm_ascend.platform.NPUPlatform.get_static_graph_wrapper_cls"]
    assert wrapper.startswith("CHANGED")
    assert "now get_static_graph_wrapper_cls(cls, extra); our override takes (cls)" in wrapper
    backend = lines["vllm_ascend.platform.NPUPlatform.get_compile_backend"]
    assert "not a staticmethod, as our override is" in backend
    # Not defined there: it may come from vLLM's Platform, which no archive given holds.
    inherited = lines["vllm_ascend.platform.NPUPlatform.check_and_update_config"]
    assert inherited.startswith("UNVERIFIABLE")
    assert "vllm.platforms.Platform" in inherited


def test_c_extension_names_use_its_strings_and_the_wheels_own_callers(
    tmp_path: Path, archives: list[Path]
) -> None:
    code, lines = _check(
        tmp_path,
        archives,
        'name = "torch_npu._C._npu_getCheckpointState"\ncalls = ["(index, pool_id)"]',
        'name = "torch_npu._C._npu_setCheckpointPoolState"\ncalls = ["(i, state, stale, [])"]',
        'name = "torch_npu.npu.graph_pool_handle"\ncalls = ["()"]',
        'name = "torch_npu.npu.NPUGraph.reset"\ncalls = ["()"]',
        'name = "torch_npu._C._npu_gone"',
    )
    assert code == 1
    state = lines["torch_npu._C._npu_getCheckpointState"]
    assert "string '_npu_getCheckpointState' in torch_npu/_C.cpython-311" in state
    assert "calls it as we do (torch_npu/npu/_graph_tree.py:3)" in state
    assert "never calls it" in lines["torch_npu._C._npu_setCheckpointPoolState"]
    assert "imports it from the C extension" in lines["torch_npu.npu.graph_pool_handle"]
    assert "C base torch_npu._C._NPUGraph" in lines["torch_npu.npu.NPUGraph.reset"]
    assert lines["torch_npu._C._npu_gone"].startswith("MOVED looked in the strings of")


def test_calls_the_wheel_makes_differently_are_unverifiable(
    tmp_path: Path, archives: list[Path]
) -> None:
    code, lines = _check(
        tmp_path, archives, 'name = "torch_npu._C._npu_getCheckpointState"\ncalls = ["(index)"]'
    )
    assert code == 0
    state = lines["torch_npu._C._npu_getCheckpointState"]
    assert state.startswith("UNVERIFIABLE")
    assert "_graph_tree.py:3 passes 2 positional" in state


def test_a_stub_gives_a_c_function_its_parameters(tmp_path: Path) -> None:
    stub = "def _npu_releasePool(device: int, pool: tuple[int, int]) -> None: ...\n"
    wheel = _wheel(tmp_path, {**TORCH_NPU, "torch_npu/_C.pyi": stub})
    code, lines = _check(
        tmp_path,
        [wheel],
        'name = "torch_npu._C._npu_releasePool"\ncalls = ["(index, pool_id)", "(index)"]',
        'name = "torch_npu._C._npu_getCheckpointState"',  # not in the stub: the binary has it
    )
    assert code == 1
    release = lines["torch_npu._C._npu_releasePool"]
    assert release.startswith("CHANGED")
    assert "torch_npu/_C.pyi:1" in release
    assert "requires pool, which we do not pass" in release
    assert "torch_npu/_C.pyi leaves it out" in lines["torch_npu._C._npu_getCheckpointState"]


def test_torch_npu_needs_its_device_module_registration(tmp_path: Path) -> None:
    files = dict(TORCH_NPU)
    files["torch_npu/_init.py"] = "def register(): ...\n"
    code, lines = _check(tmp_path, [_wheel(tmp_path, files)], 'name = "torch.npu.synchronize"')
    assert code == 1
    assert "no torch.npu registration" in lines["torch.npu.synchronize"]


def test_a_name_other_releases_spell_differently(tmp_path: Path, archives: list[Path]) -> None:
    code, lines = _check(
        tmp_path,
        archives,
        'name = "torch_npu._C._npu_oldName"\nreleases = "torch_npu<9"',
        'name = "torch_npu._C._npu_newName"\nreleases = "torch_npu>=9.9,<10"',
    )
    assert code == 1
    assert (
        "absent, as expected: only torch_npu<9 has it, not 9.9.0"
        in lines["torch_npu._C._npu_oldName"]
    )
    assert lines["torch_npu._C._npu_newName"].startswith("MOVED")


def test_a_package_no_archive_holds_is_unverifiable(tmp_path: Path) -> None:
    code, lines = _check(
        tmp_path, [_wheel(tmp_path, TORCH_NPU)], 'name = "vllm_ascend.platform.NPUPlatform"'
    )
    assert code == 0
    assert lines["vllm_ascend.platform.NPUPlatform"] == (
        "UNVERIFIABLE no archive given installs vllm_ascend"
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('name = "x"\nsurprise = 1', "entry x has unknown keys ['surprise']"),
        ('name = "x"\nreleases = "torch_npu soon"', "not a release range"),
    ],
)
def test_a_malformed_inventory_stops_with_one_line(
    tmp_path: Path, entry: str, message: str
) -> None:
    with pytest.raises(SystemExit, match=message.replace("[", r"\[").replace("]", r"\]")):
        checker.load_inventory(_inventory(tmp_path, entry))


def test_a_call_in_the_inventory_must_be_plain_arguments() -> None:
    assert checker.parse_call("(a, b, key=c)") == (2, ("key",))
    with pytest.raises(SystemExit, match="without \\* or \\*\\*"):
        checker.parse_call("(*args)")


@pytest.mark.parametrize(
    ("version", "text", "inside"),
    [
        ("2.12.0.post3", "torch_npu<2.13", True),
        ("2.13.0", "torch_npu<2.13", False),
        ("2.14.0", "torch_npu>=2.11,<2.16", True),
        ("2.11", "torch_npu>2.11.0", False),
    ],
)
def test_release_ranges(version: str, text: str, inside: bool) -> None:
    assert checker.in_range(version, text) is inside
