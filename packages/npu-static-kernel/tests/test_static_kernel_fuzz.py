"""Property-based: mutated indexes, meta files and artifacts load, rebuild, or fail clearly.

Every example builds a small cache (two artifacts of a cheap builder), applies a few random
mutations (bytes, JSON values, deletions, links leaving the cache, planted uninstall records,
crafted keys in the index) and then runs ``compile_static`` and the CLI. Allowed outcomes: the
right numbers (loaded or rebuilt), or an error of this package; the CLI exits 0 or 2 with a
one-line message; nothing outside the build directory changes and no planted script runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from npu_static_kernel import (
    BuildRequest,
    NpuStaticKernelError,
    StaticKernelBuilder,
    StaticKernelCompiler,
)
from npu_static_kernel.cli import main as cli_main


class ScaleBuilder(StaticKernelBuilder):
    """Loads whatever scale the artifact holds: a wrong file gives wrong numbers if not caught."""

    name = "fuzz-scale"

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        (out_dir / "scale.txt").write_text(str(request.args[1]))

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        scale = float((artifact_dir / "scale.txt").read_text())
        return lambda x, n: (x * scale,)


def graph(x: torch.Tensor, n: int) -> tuple[torch.Tensor]:
    return (torch.ops.aten.mul.Tensor(x, n),)


GM = torch.fx.symbolic_trace(graph)
SCALES = (2, 3)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
crafted_keys = st.sampled_from(
    ["../../victim", "../victim", "/", "", "ab" * 32, "AB" * 32, ".tmp-x", "..", "victim/../.."]
)
fields = st.sampled_from(
    ["key", "builder", "files", "created", "inputs", "size_bytes", "path", "extra"]
)
targets = st.sampled_from(["index.json", "meta.json", "scale.txt", "uninstall.json"])
mutations = st.one_of(
    st.tuples(st.just("bytes"), targets, st.binary(max_size=40)),
    st.tuples(st.just("json"), targets, json_values),
    st.tuples(st.just("field"), st.just("meta.json"), st.tuples(fields, json_values)),
    st.tuples(st.just("field"), st.just("meta.json"), st.tuples(st.just("key"), crafted_keys)),
    st.tuples(st.just("builder"), st.just("meta.json"), st.sampled_from(["ascend", "nope"])),
    st.tuples(st.just("flip"), targets, st.integers(0, 400)),
    st.tuples(st.just("delete"), targets, st.none()),
    st.tuples(st.just("link"), targets, st.sampled_from(["victim", "victim/precious.txt"])),
    st.tuples(st.just("index"), st.just("index.json"), st.tuples(crafted_keys, json_values)),
    st.tuples(st.just("plant"), st.just("uninstall.json"), st.booleans()),
)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _mutate(tmp: Path, key: str, kind: str, target: str, value: Any) -> None:
    cache = tmp / "build" / "static_kernel_cache"
    path = cache / target if target == "index.json" else cache / "entries" / key / target
    if not path.parent.is_dir() or path.parent.is_symlink():
        return
    if kind in ("link", "delete", "bytes", "json") and (path.is_symlink() or path.is_dir()):
        return
    if kind == "bytes":
        path.write_bytes(value)
    elif kind == "json":
        path.write_text(json.dumps(value))
    elif kind == "flip" and path.is_file() and not path.is_symlink():
        data = bytearray(path.read_bytes())
        if data:
            data[value % len(data)] ^= 0x20
            path.write_bytes(bytes(data))
    elif kind == "delete":
        path.unlink(missing_ok=True)
    elif kind == "link":
        path.unlink(missing_ok=True)
        path.symlink_to(tmp / value)
    elif kind in ("field", "builder", "index"):
        with contextlib.suppress(OSError, ValueError):
            document = json.loads(path.read_text())
            if not isinstance(document, dict):
                return
            if kind == "field":
                document[value[0]] = value[1]
            elif kind == "builder":
                document["builder"] = value
            else:
                document[value[0]] = value[1]
            path.write_text(json.dumps(document))
    elif kind == "plant":
        script = tmp / "victim" / "payload.sh"
        record: Any = [str(script)] if value else {"scripts": [{"path": str(script)}]}
        path.write_text(json.dumps(record))


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(st.lists(st.tuples(st.sampled_from(SCALES), mutations), min_size=1, max_size=4))
def test_mutated_cache_loads_rebuilds_or_fails_clearly(
    changes: list[tuple[int, tuple[str, str, Any]]],
) -> None:
    with tempfile.TemporaryDirectory(prefix="npu-static-kernel-fuzz-") as name:
        tmp = Path(name)
        victim = tmp / "victim"
        victim.mkdir()
        (victim / "precious.txt").write_text("keep me")
        (victim / "payload.sh").write_text(f"touch {tmp / 'pwned'}\n")
        build = tmp / "build"
        compiler = StaticKernelCompiler(build, builder=ScaleBuilder(), strict=True)
        for n in SCALES:
            compiler.compile_static(GM, [torch.ones(2), n])
        entries = sorted(p.name for p in (build / "static_kernel_cache" / "entries").iterdir())
        by_scale = {}
        for key in entries:
            scale = (build / "static_kernel_cache" / "entries" / key / "scale.txt").read_text()
            by_scale[int(scale)] = key
        for n, (kind, target, value) in changes:
            _mutate(tmp, by_scale[n], kind, target, value)
        before = _snapshot(victim)

        logging.getLogger("npu_static_kernel").disabled = True
        try:
            fresh = StaticKernelCompiler(build, builder=ScaleBuilder(), strict=True)
            errors: list[str] = []
            for n in SCALES:
                try:
                    fn = fresh.compile_static(GM, [torch.ones(2), n])
                except NpuStaticKernelError as error:
                    errors.append(str(error))
                    continue
                assert fn(torch.ones(2), n)[0].tolist() == [float(n)] * 2
            assert all("\n" not in message for message in errors)
            for argv in (["list"], ["list", "--json"], ["clean", "--records"], ["list"]):
                err = io.StringIO()
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    code = cli_main([*argv, "--build-dir", str(build)])
                assert code in (0, 2), argv
                if code == 2:
                    assert err.getvalue().startswith("error: ")
                    assert err.getvalue().count("\n") == 1
        finally:
            logging.getLogger("npu_static_kernel").disabled = False
        assert _snapshot(victim) == before
        assert not (tmp / "pwned").exists()
        assert sorted(os.listdir(tmp)) == ["build", "victim"]
