"""``npu-static-kernel pack/unpack``: verified archives move a cache; hostile ones are refused."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from npu_static_kernel import ArtifactCache, BuildRequest, StaticKernelBuilder, StaticKernelCompiler
from npu_static_kernel.cli import main as cli_main


class ScaleBuilder(StaticKernelBuilder):
    name = "pack-scale"

    def __init__(self) -> None:
        self.built: list[int] = []

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        (out_dir / "sub").mkdir()
        (out_dir / "sub" / "scale.txt").write_text(str(request.args[1]))
        self.built.append(request.args[1])

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        scale = float((artifact_dir / "sub" / "scale.txt").read_text())
        return lambda x, n: (x * scale,)


def graph(x: torch.Tensor, n: int) -> tuple[torch.Tensor]:
    return (torch.ops.aten.mul.Tensor(x, n),)


GM = torch.fx.symbolic_trace(graph)


@pytest.fixture
def archive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    source = tmp_path / "source"
    compiler = StaticKernelCompiler(source, builder=ScaleBuilder(), strict=True)
    for n in (2, 3):
        compiler.compile_static(GM, [torch.ones(2), n])
    path = tmp_path / "kernels.tar.gz"
    assert cli_main(["pack", str(path), "--build-dir", str(source)]) == 0
    assert "packed 2 artifact(s)" in capsys.readouterr().out
    return path


def test_pack_then_unpack_elsewhere_hits_without_building(
    archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "elsewhere" / "build"
    assert cli_main(["unpack", str(archive), "--build-dir", str(target)]) == 0
    assert "unpacked 2 verified artifact(s)" in capsys.readouterr().out
    cache = ArtifactCache(target)
    for entry in cache.entries():
        assert entry.path == str(cache.entry_dir(entry.key))
        cache.verify(entry.key)
    builder = ScaleBuilder()
    compiler = StaticKernelCompiler(target, builder=builder, strict=True)
    fn = compiler.compile_static(GM, [torch.ones(2), 3])
    assert fn(torch.ones(2), 3)[0].tolist() == [3.0, 3.0]
    assert builder.built == []
    assert compiler.counters.hits == 1
    # Unpacking again keeps the verified copies.
    assert cli_main(["unpack", str(archive), "--build-dir", str(target)]) == 0
    assert "unpacked 0 verified artifact(s)" in capsys.readouterr().out


def _members(path: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(path) as tar:
        return [
            (m, tar.extractfile(m).read() if m.isreg() else None)  # type: ignore[union-attr]
            for m in tar.getmembers()
        ]


def _write(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _with_manifest(
    members: list[tuple[tarfile.TarInfo, bytes | None]], mutate: Callable[[dict[str, Any]], None]
) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    info, data = members[0]
    assert data is not None
    manifest = json.loads(data)
    mutate(manifest)
    return [(info, json.dumps(manifest).encode()), *members[1:]]


def _tamper_content(members: list[Any]) -> list[Any]:
    info, data = members[-1]
    return [*members[:-1], (info, data[:-1] + bytes([data[-1] ^ 1]))]


def _add_member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> Any:
    def change(members: list[Any]) -> list[Any]:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = link
        data = b"#!/bin/sh\n" if kind == tarfile.REGTYPE else None
        digest = hashlib.sha256(data or b"").hexdigest()

        def declare(manifest: dict[str, Any]) -> None:
            manifest["files"][name] = {"sha256": digest, "size": len(data or b"")}

        return [*_with_manifest(members, declare), (info, data)]

    return change


def _declare_huge(members: list[Any]) -> list[Any]:
    def declare(manifest: dict[str, Any]) -> None:
        name = next(iter(manifest["files"]))
        manifest["files"][name]["size"] = 1 << 40

    return _with_manifest(members, declare)


def _manifest_name(name: str) -> Any:
    def change(members: list[Any]) -> list[Any]:
        def declare(manifest: dict[str, Any]) -> None:
            manifest["files"][name] = {"sha256": "0" * 64, "size": 1}

        return _with_manifest(members, declare)

    return change


def _drop_manifest(members: list[Any]) -> list[Any]:
    return members[1:]


KEY = "ab" * 32


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_tamper_content, "does not match its SHA-256"),
        (_add_member(f"entries/{KEY}/../../../evil.sh"), "leaves the cache"),
        (_add_member("/tmp/evil.sh"), "leaves the cache"),
        (_add_member(f"entries/{KEY}/link", tarfile.SYMTYPE, "/etc/passwd"), "not a regular file"),
        (_add_member(f"entries/{KEY}/hard", tarfile.LNKTYPE, "/etc/passwd"), "not a regular file"),
        (_add_member(f"entries/{KEY}/dev", tarfile.CHRTYPE), "not a regular file"),
        (_add_member("entries/not-a-key/x"), "not an artifact key"),
        (_declare_huge, "more than the limit"),
        (_manifest_name("entries/../x/y"), "leaves the cache"),
        (_drop_manifest, "first member is not manifest.json"),
    ],
)
def test_unpack_refuses_hostile_archives_and_writes_nothing(
    archive: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Callable[[list[Any]], list[Any]],
    message: str,
) -> None:
    bad = tmp_path / "bad.tar.gz"
    _write(bad, change(_members(archive)))
    target = tmp_path / "target"
    assert cli_main(["unpack", str(bad), "--build-dir", str(target)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("error: refusing")
    assert err.count("\n") == 1
    assert ArtifactCache(target).entries() == []
    assert not (tmp_path / "evil.sh").exists()
    leftovers = [p for p in target.rglob("*") if p.is_file()] if target.exists() else []
    assert leftovers == []


def test_unpack_bounds_sizes_and_reads_no_garbage(
    archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "target"
    assert cli_main(["unpack", str(archive), "--build-dir", str(target), "--max-bytes", "10"]) == 2
    assert "more than the limit of 10" in capsys.readouterr().err
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"\x1f\x8b not really gzip")
    assert cli_main(["unpack", str(garbage), "--build-dir", str(target)]) == 2
    assert capsys.readouterr().err.startswith("error: cannot")
