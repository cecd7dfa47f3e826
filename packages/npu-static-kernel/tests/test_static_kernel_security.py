"""Hostile cache contents: crafted keys and uninstall records, swapped artifacts, bad JSON."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from npu_static_kernel import (
    ArtifactCache,
    BuildRequest,
    CacheError,
    ConfigError,
    StaticKernelBuilder,
    StaticKernelCompiler,
    compute_key,
)
from npu_static_kernel.cli import main as cli_main


class ScaleBuilder(StaticKernelBuilder):
    """The artifact is the graph's scale factor as text; loading trusts it (as real loaders do)."""

    name = "scale"

    def __init__(self) -> None:
        self.built: list[str] = []

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        (out_dir / "scale.txt").write_text(str(request.gm.scale))
        self.built.append(request.key)

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        scale = float((artifact_dir / "scale.txt").read_text())
        return lambda x: (x * scale,)


def scaled(factor: float) -> torch.fx.GraphModule:
    def graph(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.ops.aten.mul.Tensor(x, factor),)

    gm = torch.fx.symbolic_trace(graph)
    gm.scale = factor
    return gm


def _build(build_dir: Path, factor: float = 2.0) -> tuple[str, ScaleBuilder]:
    builder = ScaleBuilder()
    StaticKernelCompiler(build_dir, builder=builder, strict=True).compile_static(
        scaled(factor), [torch.ones(3)]
    )
    return builder.built[-1], builder


def _meta(key: str, **extra: Any) -> dict[str, Any]:
    return {
        "key": key,
        "builder": "ascend",
        "device": "cpu",
        "inputs": [],
        "created": "2026-01-01T00:00:00+00:00",
        **extra,
    }


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_clean_ignores_a_key_that_climbs_out_of_the_cache(tmp_path: Path) -> None:
    build_dir = tmp_path / "build"
    key, _ = _build(build_dir)
    victim = build_dir / "victim"
    victim.mkdir()
    crafted = "../../victim"
    (victim / "meta.json").write_text(json.dumps(_meta(crafted)))
    (victim / "precious.txt").write_text("keep me")
    cache = ArtifactCache(build_dir)
    index = json.loads((cache.root / "index.json").read_text())
    index[crafted] = _meta(crafted)
    (cache.root / "index.json").write_text(json.dumps(index))
    assert [e.key for e in cache.entries()] == [key]
    assert cli_main(["clean", "--build-dir", str(build_dir)]) == 0
    assert (victim / "precious.txt").read_text() == "keep me"
    assert cache.entries() == []
    with pytest.raises(CacheError, match="not an artifact key"):
        cache.remove(crafted)


def test_clean_never_runs_a_script_the_cache_did_not_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "ascend" / "latest"))
    marker = tmp_path / "pwned"
    payload = tmp_path / "payload.sh"
    payload.write_text(f"touch {marker}\n")
    record = {"scripts": [{"path": str(payload), "sha256": _sha(payload)}]}
    build_dir = tmp_path / "build"
    cache = ArtifactCache(build_dir)
    # 1. An absolute "key" in the index naming a directory outside the cache, with an
    #    uninstall record in the format earlier versions wrote (a list of script paths).
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "meta.json").write_text(json.dumps(_meta(str(outside))))
    (outside / "uninstall.json").write_text(json.dumps([str(payload)]))
    # 2. A well-formed Ascend entry inside the cache whose record lists the payload.
    key = "ab" * 32
    entry = cache.root / "entries" / key
    entry.mkdir(parents=True)
    run = entry / "static_kernel_20260101000000.run"
    run.write_text("#!/bin/sh\n")
    files = {run.name: {"sha256": _sha(run), "size": run.stat().st_size}}
    (entry / "meta.json").write_text(json.dumps(_meta(key, files=files)))
    # 3. ... and a script where the .run installs its uninstaller, changed since it was recorded.
    legit = tmp_path / "ascend" / "vendor" / "opp" / "static_kernel" / "ai_core" / run.stem
    legit.mkdir(parents=True)
    (legit / "uninstall.sh").write_text(f"touch {marker}\n")
    record["scripts"].append({"path": str(legit / "uninstall.sh"), "sha256": "0" * 64})
    (entry / "uninstall.json").write_text(json.dumps(record))
    cache.root.joinpath("index.json").write_text(
        json.dumps({str(outside): _meta(str(outside)), key: _meta(key)})
    )
    assert cli_main(["clean", "--build-dir", str(build_dir)]) == 0
    assert not marker.exists()
    assert not entry.exists()
    assert (outside / "meta.json").exists()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_another_graphs_artifact_under_a_key_is_rebuilt_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key2, _ = _build(tmp_path, 2.0)
    key3, _ = _build(tmp_path, 3.0)
    cache = ArtifactCache(tmp_path)
    # The artifact of the x*3 graph now sits under the key of the x*2 graph.
    (cache.entry_dir(key2) / "scale.txt").write_bytes(
        (cache.entry_dir(key3) / "scale.txt").read_bytes()
    )
    builder = ScaleBuilder()
    compiler = StaticKernelCompiler(tmp_path, builder=builder, strict=True)
    with caplog.at_level(logging.WARNING, logger="npu_static_kernel"):
        fn = compiler.compile_static(scaled(2.0), [torch.ones(3)])
    assert fn(torch.ones(3))[0].tolist() == [2.0, 2.0, 2.0]
    assert builder.built == [key2]
    assert caplog.text.count("discarding the unreadable artifact") == 1
    assert "SHA-256" in caplog.text
    assert cache.verify(key2) == cache.entry_dir(key2)


def test_meta_files_record_sha256_and_size(tmp_path: Path) -> None:
    key, _ = _build(tmp_path)
    cache = ArtifactCache(tmp_path)
    meta = json.loads((cache.entry_dir(key) / "meta.json").read_text())
    path = cache.entry_dir(key) / "scale.txt"
    assert meta["files"] == {"scale.txt": {"sha256": _sha(path), "size": path.stat().st_size}}
    (listed,) = cache.entries()
    assert listed.size_bytes == path.stat().st_size


@pytest.mark.parametrize("command", ["list", "clean"])
def test_cli_on_an_unreadable_cache_prints_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    _build(tmp_path)
    real_listdir = os.listdir

    def listdir(path: Any = ".") -> list[str]:
        # What a directory without read permission gives a non-root user; the cache lists
        # entries/ through the descriptor it reached it with.
        if isinstance(path, int):
            raise PermissionError(13, "Permission denied")
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    assert cli_main([command, "--build-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read the static kernel cache")
    assert err.count("\n") == 1


@pytest.mark.parametrize("document", ["[1, 2]", '"text"', "null", "7", '{"key": 5}'])
def test_meta_json_that_is_not_an_entry_is_a_miss_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: str
) -> None:
    key, _ = _build(tmp_path)
    cache = ArtifactCache(tmp_path)
    (cache.entry_dir(key) / "meta.json").write_text(document)
    assert cache.lookup(key) is None
    assert cli_main(["list", "--build-dir", str(tmp_path)]) == 0
    assert "no static kernel artifacts" in capsys.readouterr().out
    builder = ScaleBuilder()
    compiler = StaticKernelCompiler(tmp_path, builder=builder, strict=True)
    fn = compiler.compile_static(scaled(2.0), [torch.ones(3)])
    assert fn(torch.ones(3))[0].tolist() == [2.0, 2.0, 2.0]
    assert builder.built == [key]
    (cache.entry_dir(key) / "meta.json").write_text(document)
    assert cli_main(["clean", "--build-dir", str(tmp_path)]) == 0  # the CLI can repair it
    assert not cache.entry_dir(key).exists()


def test_index_entries_with_missing_fields_or_null_dates_are_listed_from_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key2, _ = _build(tmp_path, 2.0)
    key3, _ = _build(tmp_path, 3.0)
    cache = ArtifactCache(tmp_path)
    index = {key2: {"key": key2}, key3: {**_meta(key3), "created": None}, "x": 1}
    (cache.root / "index.json").write_text(json.dumps(index))
    assert sorted(e.key for e in cache.entries()) == sorted([key2, key3])
    assert cli_main(["list", "--build-dir", str(tmp_path)]) == 0
    assert key2[:12] in capsys.readouterr().out
    assert cli_main(["clean", "--build-dir", str(tmp_path)]) == 0
    assert cache.entries() == []


def test_a_nul_byte_in_the_build_dir_is_a_config_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ConfigError, match="NUL byte"):
        StaticKernelCompiler("build\0dir")
    with pytest.raises(ConfigError, match="NUL byte"):
        ArtifactCache("build\0dir")
    assert cli_main(["list", "--build-dir", "build\0dir"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the build directory")
    assert err.count("\n") == 1


def test_an_entry_directory_that_is_a_symlink_is_never_followed(tmp_path: Path) -> None:
    key, _ = _build(tmp_path / "build")
    cache = ArtifactCache(tmp_path / "build")
    elsewhere = tmp_path / "elsewhere"
    os.replace(cache.entry_dir(key), elsewhere)
    cache.entry_dir(key).symlink_to(elsewhere, target_is_directory=True)
    assert cache.lookup(key) is None
    assert cache.entries() == []
    assert cache.remove(key)
    assert (elsewhere / "meta.json").exists()
    assert not cache.entry_dir(key).exists()


def test_keys_are_validated_before_any_path_is_built(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    for bad in ["../x", "/etc", "AB" * 32, "ab" * 31, "ab" * 32 + "/..", ""]:
        with pytest.raises(CacheError, match="not an artifact key"):
            cache.entry_dir(bad)
        assert cache.lookup(bad) is None
        with pytest.raises(CacheError, match="not an artifact key"):
            cache.remove(bad)
    assert not cache.root.exists()


def test_key_of_a_real_graph_is_a_valid_key(tmp_path: Path) -> None:
    key = compute_key(scaled(2.0), [torch.ones(3)], ScaleBuilder())
    assert ArtifactCache(tmp_path).entry_dir(key).name == key
