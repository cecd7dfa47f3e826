"""The archives: the files of the wheels and sdists given, read without installing them.

``Sources`` maps each file to its path in an installed tree and caches what is read and
parsed; the helpers beside it find a module's C extension, look for a name among a binary's C
strings and read a distribution's name and version from its metadata.
"""

from __future__ import annotations

import ast
import re
import tarfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from ._inventory import _normal

# What is read from an sdist: the rest (tests, docs, C++ sources) is never looked at.
_SDIST_SUFFIXES = (".py", ".pyi", ".yaml", ".so")


class Sources:
    """The files of the given wheels and sdists, by their path in an installed tree."""

    def __init__(self, archives: Sequence[Path]) -> None:
        self.archives = list(archives)
        self._zips: dict[str, tuple[zipfile.ZipFile, str]] = {}
        self._loose: dict[str, bytes] = {}
        #: ``(distribution, version)`` of each archive, from its metadata.
        self.distributions: list[tuple[str, str]] = []
        self._trees: dict[str, ast.Module] = {}
        self._bytes: dict[str, bytes] = {}
        for archive in self.archives:
            if archive.suffix == ".whl" or archive.suffix == ".zip":
                self._add_wheel(archive)
            elif archive.name.endswith((".tar.gz", ".tgz")):
                self._add_sdist(archive)
            else:
                raise SystemExit(f"{archive}: not a wheel (.whl) or an sdist (.tar.gz)")

    def _add_wheel(self, archive: Path) -> None:
        zf = zipfile.ZipFile(archive)
        for info in zf.infolist():
            if info.is_dir():
                continue
            self._zips.setdefault(info.filename, (zf, info.filename))
            if info.filename.endswith(".dist-info/METADATA"):
                self.distributions.append(_name_version(zf.read(info).decode(errors="replace")))

    def _add_sdist(self, archive: Path) -> None:
        with tarfile.open(archive, "r:gz") as tf:
            for member in tf.getmembers():
                # Every sdist member sits under `<name>-<version>/`.
                path = member.name.partition("/")[2]
                if not member.isfile():
                    continue
                data_file = tf.extractfile(member)
                if data_file is None:
                    continue
                if path == "PKG-INFO":
                    text = data_file.read().decode(errors="replace")
                    self.distributions.append(_name_version(text))
                    continue
                if not path.endswith(_SDIST_SUFFIXES):
                    continue
                data = data_file.read()
                # A src/ layout installs without its src/ prefix.
                for installed in (path, path.removeprefix("src/")):
                    self._loose.setdefault(installed, data)

    def close(self) -> None:
        """Close the wheels."""
        for zf in {id(zf): zf for zf, _ in self._zips.values()}.values():
            zf.close()

    def version(self, distribution: str) -> str | None:
        """The version of ``distribution`` among the archives, if one of them is it."""
        wanted = _normal(distribution)
        return next((v for name, v in self.distributions if _normal(name) == wanted), None)

    def has(self, path: str) -> bool:
        """Whether the archives hold ``path``."""
        return path in self._zips or path in self._loose

    def paths(self) -> Iterator[str]:
        """Every file path the archives hold."""
        yield from self._zips
        yield from (path for path in self._loose if path not in self._zips)

    def has_package(self, top: str) -> bool:
        """Whether some archive installs the top-level module or package ``top``."""
        prefix = f"{top}/"
        return any(path.startswith(prefix) or path == f"{top}.py" for path in self.paths())

    def read(self, path: str) -> bytes:
        """The bytes of one file (binaries and sources are cached: several names read them)."""
        cached = self._bytes.get(path)
        if cached is not None:
            return cached
        if path in self._zips:
            zf, member = self._zips[path]
            data = zf.read(member)
        else:
            data = self._loose[path]
        self._bytes[path] = data
        return data

    def tree(self, path: str) -> ast.Module:
        """The parsed module of one Python source or stub file."""
        tree = self._trees.get(path)
        if tree is None:
            tree = self._trees[path] = ast.parse(self.read(path), filename=path)
        return tree


def _extension_path(sources: Sources, base: str) -> str | None:
    """The C extension file of module path ``base`` (``a/_C.cpython-311-x86_64-linux-gnu.so``)."""
    pattern = re.compile(re.escape(base) + r"(\.[^/]+)?\.(so|pyd)")
    return next((path for path in sources.paths() if pattern.fullmatch(path)), None)


def _has_c_string(data: bytes, name: bytes) -> bool:
    """Whether ``name`` is a C string in ``data``: NUL-terminated, after a byte no name has.

    A method table (``PyMethodDef``) holds each Python name as such a string.
    """
    needle = name + b"\0"
    start = data.find(needle)
    while start != -1:
        before = data[start - 1] if start else 0
        if not (chr(before).isalnum() or before == ord("_")):
            return True
        start = data.find(needle, start + 1)
    return False


def _name_version(metadata: str) -> tuple[str, str]:
    fields = dict(
        line.split(": ", 1)
        for line in metadata.splitlines()
        if line.startswith(("Name: ", "Version: "))
    )
    return fields.get("Name", "?"), fields.get("Version", "?")
