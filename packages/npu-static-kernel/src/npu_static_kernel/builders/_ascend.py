"""Ascend builder: CANN's ``op_compiler`` turns op statistics into a static kernel package."""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

from npu_static_kernel import _device
from npu_static_kernel._cann_names import (
    ASCEND_GLOBAL_LOG_LEVEL_ENV,
    ASCEND_HOME_PATH_ENV,
    LOG_LEVELS,
    OP_COMPILER,
    RUN_GLOB,
    RUN_NAME,
    VERSION_FILES,
    uninstaller_glob,
)
from npu_static_kernel._interface import BuildRequest, StaticKernelBuilder
from npu_static_kernel._io import atomic_write_json
from npu_static_kernel._record import OpRecord, default_supports
from npu_static_kernel.errors import BuildError

__all__ = ["AscendBuilder"]

# Not a CANN file: where this package records the uninstall scripts an install left behind.
UNINSTALL_RECORD = "uninstall.json"

logger = logging.getLogger("npu_static_kernel")

# .run packages installed by this process (SHA-256 of the file): installing mutates CANN's shared
# op library, so the same package is never executed twice by one process.
_installed: set[str] = set()
_installed_lock = threading.Lock()


class AscendBuilder(StaticKernelBuilder):
    """Run CANN's ``op_compiler`` on the recorded op statistics and install the ``.run`` it makes.

    ``build`` runs ``op_compiler -p <pid dir> -v <soc> -j <jobs> -o <outputs dir>`` and keeps the
    produced ``static_kernel_<datetime>.run`` as the artifact; ``install`` executes it (once per
    node, once per process) and records its ``uninstall.sh`` for ``npu-static-kernel clean``;
    ``load`` asks aclnn to reselect kernels and returns ``gm.forward`` unchanged: on the NPU the
    static kernels are picked by aclnn at launch time, not called by Python.

    Args:
        soc_version: The ``-v`` value (``"Ascend910B3"``...); default: asked from torch_npu.
        jobs: Parallel compile jobs (``-j``); default: the CPU count.
        blacklist: Op type substrings never compiled (``["MatMul"]`` keeps MatMul dynamic).
        op_compiler: The executable name or path; looked up on PATH.
    """

    name: ClassVar[str] = "ascend"

    def __init__(
        self,
        soc_version: str | None = None,
        *,
        jobs: int | None = None,
        blacklist: Iterable[str] = (),
        op_compiler: str = OP_COMPILER,
    ) -> None:
        self.soc_version = soc_version
        self.jobs = jobs if jobs is not None else (os.cpu_count() or 1)
        self.blacklist = tuple(blacklist)
        self.op_compiler = op_compiler

    def _soc(self) -> str:
        soc = self.soc_version or _device.npu_soc_name()
        if not soc:
            raise BuildError(
                "cannot tell the Ascend SoC version (torch_npu is not usable here); pass "
                "AscendBuilder(soc_version='Ascend910B3') or run on an NPU with torch_npu and CANN"
            )
        return soc

    def compute_hash(self) -> str:
        """Return the SoC, CANN version and blacklist: each changes the compiled kernels."""
        return json.dumps(
            {"soc": self._soc(), "cann": _cann_version(), "blacklist": sorted(self.blacklist)}
        )

    def supports_op(self, record: OpRecord) -> bool:
        """Aten kernels whose op type matches no blacklist entry."""
        return default_supports(record) and not any(b in record.op_type for b in self.blacklist)

    def _executable(self) -> str:
        found = shutil.which(self.op_compiler)
        if found is None:
            raise BuildError(
                f"CANN's `{self.op_compiler}` was not found on PATH; static kernels on Ascend need "
                "the CANN toolkit: install it and `source <ascend-toolkit>/set_env.sh`, or use "
                "InductorBuilder on CUDA/CPU"
            )
        return found

    def build(self, request: BuildRequest, out_dir: Path) -> None:
        """Compile the ``<pid>/`` op statistics into ``static_kernel_*.run`` inside ``out_dir``."""
        exe = self._executable()
        stats = request.statistics
        if stats is None:
            raise BuildError(
                "the Ascend builder needs recorded op statistics; call it through "
                "StaticKernelCompiler.compile_static, which records them first"
            )
        if not stats.selected:
            # Nothing to compile (only views or blacklisted ops): an empty artifact is still a
            # valid answer, so the next process does not record and retry for nothing.
            return
        before = set(stats.output_dir.glob(RUN_GLOB))
        command = [exe, "-p", str(stats.selected_dir), "-v", self._soc(), "-j", str(self.jobs)]
        command += ["-o", str(stats.output_dir)]
        level = LOG_LEVELS.get(os.environ.get(ASCEND_GLOBAL_LOG_LEVEL_ENV, ""))
        if level is not None:
            command += ["-l", level]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip()[-2000:]
            raise BuildError(
                f"op_compiler failed with exit code {result.returncode}: {tail}; the op "
                f"statistics are in {stats.selected_dir} (exclude failing ops with "
                "AscendBuilder(blacklist=[...]))"
            )
        produced = sorted(set(stats.output_dir.glob(RUN_GLOB)) - before)
        if not produced:
            raise BuildError(
                f"op_compiler succeeded but wrote no static_kernel_*.run into {stats.output_dir}; "
                "check the CANN version and the op_compiler log"
            )
        for run in produced:
            shutil.copy2(run, out_dir / run.name)

    def install(self, artifact_dir: Path) -> None:
        """Execute every ``.run`` package of the artifact once in this process.

        The ``uninstall.sh`` scripts the packages created are recorded (path and SHA-256) in the
        artifact's ``uninstall.json`` for :meth:`uninstall`.
        """
        installed: list[dict[str, str]] = []
        runs: dict[str, str] = {}
        for run in sorted(artifact_dir.glob(RUN_GLOB)):
            digest = hashlib.sha256(run.read_bytes()).hexdigest()
            runs[run.name] = digest
            with _installed_lock:
                if digest in _installed:
                    continue
                result = _execute(run, artifact_dir)
                if result.returncode != 0:
                    tail = (result.stderr or result.stdout).strip()[-2000:]
                    raise BuildError(
                        f"installing {run.name} failed with exit code {result.returncode}: {tail}; "
                        "check write access to the CANN opp directory (ASCEND_HOME_PATH)"
                    )
                _installed.add(digest)
            for script in _find_uninstallers(run.stem):
                installed.append({"path": script, "sha256": _sha256(Path(script))})
        if installed:
            _write_uninstall_record(artifact_dir, {"runs": runs, "scripts": installed})

    @classmethod
    def uninstall(cls, artifact_dir: Path) -> None:
        """Run the ``uninstall.sh`` scripts that :meth:`install` recorded for this artifact.

        A script runs only if it is where a ``.run`` package of this artifact puts its
        uninstaller under the current ``ASCEND_HOME_PATH`` (recomputed, not read from the
        record) and its SHA-256 still equals the one recorded at install time.
        """
        run_uninstallers(artifact_dir)

    def load(self, artifact_dir: Path, request: BuildRequest) -> Callable[..., Any]:
        """Let aclnn reselect kernels and return ``gm.forward`` (the kernels load at launch)."""
        _device.npu_reselect_static_kernel()
        return request.gm.forward


def _cann_version() -> str:
    home = os.environ.get(ASCEND_HOME_PATH_ENV)
    if not home:
        return "unknown"
    for name in VERSION_FILES:
        path = Path(home) / name
        if path.is_file():
            return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return home


def _find_uninstallers(run_stem: str) -> list[str]:
    home = os.environ.get(ASCEND_HOME_PATH_ENV)
    if not home:
        return []
    return sorted(glob.glob(uninstaller_glob(home, run_stem)))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _execute(run: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Execute a ``.run`` package; from a private executable copy if it cannot be made executable.

    A cache baked into an image or mounted read-only cannot change the file mode.
    """
    try:
        if not os.access(run, os.X_OK):
            run.chmod(run.stat().st_mode | stat.S_IXUSR)
        return subprocess.run([str(run)], capture_output=True, text=True, check=False, cwd=cwd)
    except OSError:
        with tempfile.TemporaryDirectory(prefix="npu-static-kernel-run-") as tmp:
            copy = Path(tmp) / run.name
            shutil.copyfile(run, copy)
            copy.chmod(stat.S_IRWXU)
            return subprocess.run([str(copy)], capture_output=True, text=True, check=False, cwd=cwd)


def _write_uninstall_record(artifact_dir: Path, record: dict[str, Any]) -> None:
    try:
        atomic_write_json(artifact_dir / UNINSTALL_RECORD, record)
    except OSError as exc:
        # A read-only cache: the kernels are installed, only `clean` cannot undo it later.
        logger.warning("cannot record the uninstall scripts in %s: %s", artifact_dir, exc)


def _recorded_scripts(artifact_dir: Path) -> dict[str, str]:
    """Recorded script path -> SHA-256, from a well-formed ``uninstall.json``; else empty."""
    path = artifact_dir / UNINSTALL_RECORD
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
            return {}
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    scripts = record.get("scripts") if isinstance(record, dict) else None
    if not isinstance(scripts, list):
        return {}
    found: dict[str, str] = {}
    for item in scripts:
        if isinstance(item, dict):
            script, digest = item.get("path"), item.get("sha256")
            if isinstance(script, str) and isinstance(digest, str):
                found[script] = digest
    return found


def run_uninstallers(artifact_dir: Path) -> list[str]:
    """Run the verified ``uninstall.sh`` scripts of an artifact; return those that ran.

    Only scripts this package's install step recorded, found again now at the location a
    ``.run`` package of the artifact installs to, and unchanged since (same SHA-256), run.
    """
    recorded = _recorded_scripts(artifact_dir)
    if not recorded:
        return []
    ran: list[str] = []
    for run in sorted(artifact_dir.glob(RUN_GLOB)):
        if run.is_symlink() or RUN_NAME.fullmatch(run.name) is None:
            continue
        for script in _find_uninstallers(run.stem):
            expected = recorded.get(script)
            try:
                if expected is None or Path(script).is_symlink():
                    continue
                if _sha256(Path(script)) != expected:
                    continue
            except OSError:
                continue
            subprocess.run(["bash", script], check=False, capture_output=True)
            ran.append(script)
    return ran
