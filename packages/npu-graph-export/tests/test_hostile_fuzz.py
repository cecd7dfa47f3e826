"""A standing fuzz suite for the reference runtime and the `run` CLI on hostile files.

Valid exports are mutated by hypothesis (weight paths, declared shapes and dtypes, attributes,
edges, raw bytes, ``.npy`` input headers) and loaded and run in a child process whose address
space is capped (``RLIMIT_AS``), with the runtime's ``max_bytes`` below that cap. Every outcome
must be a clear project error (one line) or a result; for the mutations that cannot describe
another valid model (paths, sizes, dtypes, Data declarations) the result must equal the
unmutated model's. Nothing outside the child's working directory may be read or changed: a
"secret" file of the right size sits next to the model, and reading it would change the output.

This file is also the child: ``python test_hostile_fuzz.py WORKDIR`` runs the examples.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ADDRESS_SPACE = 1536 << 20
"""The child's address-space cap: the interpreter, numpy, protobuf, hypothesis, and the budget."""

BUDGET = 256 << 20
"""The runtime's max_bytes in the child."""

EXAMPLES = {"strict": 600, "loose": 400, "cli": 150}
X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)


# -- parent: build the work directory, run the child, check nothing outside changed -------------


def _snapshot(root: Path) -> dict[str, str]:
    state: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if relative.split(os.sep)[0] in {"case", "cwd"}:  # the child's own directories
            continue
        if path.is_symlink():
            state[relative] = f"link:{os.readlink(path)}"
        elif path.is_file():
            stat = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            state[relative] = f"{stat.st_size}:{stat.st_mtime_ns}:{digest}"
        else:
            state[relative] = "dir"
    return state


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from npu_graph_export import ExportConfig, dynamo_export

    class Small(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(4, 3)
            self.register_buffer("offset", torch.arange(3, dtype=torch.float32))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.proj(x) + self.offset, dim=-1)

    class Shapes(torch.nn.Module):
        """Exported with dynamic shapes: Shape, Pack, BroadcastTo, ConcatV2, Range, Fill."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            wide = torch.cat([x.unsqueeze(0).expand(3, *x.shape)] * 2, 0)
            ramp = torch.arange(x.shape[-1], dtype=x.dtype)
            half = torch.full((2, x.shape[-1]), 0.5)
            return wide.sum(0) + ramp + half[0]

    root = tmp_path_factory.mktemp("hostile-fuzz")
    torch.manual_seed(0)
    model = Small().eval()
    for name, limit in (("files", 0), ("embedded", 1 << 30)):
        dynamo_export(
            torch.from_numpy(X),
            model=model,
            export_path=root / name,
            config=ExportConfig(embed_limit_bytes=limit),
        )
    dynamo_export(torch.from_numpy(X), model=Shapes(), export_path=root / "shapes", dynamic=True)
    with torch.no_grad():
        np.save(root / "reference.npy", model(torch.from_numpy(X)).numpy())
        np.save(root / "shapes.npy", Shapes()(torch.from_numpy(X)).numpy())
    outside = root / "outside"
    outside.mkdir()
    # As large as proj_weight (float32[3, 4]) and under every name a mutation may point at.
    secret = np.full(12, 1e6, np.float32).tobytes()
    for name in ("secret", "proj_weight", "proj_bias", "offset"):
        (outside / name).write_bytes(secret)
    return root


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_mutated_models_give_the_reference_or_a_clear_error(workdir: Path, kind: str) -> None:
    before = _snapshot(workdir)
    cwd = workdir / "cwd"
    cwd.mkdir(exist_ok=True)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    try:
        result = subprocess.run(
            [sys.executable, __file__, str(workdir), kind],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        current = workdir / "current"
        last = current.read_text() if current.exists() else "none"
        current.unlink(missing_ok=True)
        shutil.rmtree(workdir / "case", ignore_errors=True)
    assert result.returncode == 0, (
        f"exit {result.returncode}; last example: {last}\n{result.stdout[-3000:]}"
        f"\n{result.stderr[-6000:]}"
    )
    assert f"ran {EXAMPLES[kind]} examples" in result.stdout, result.stdout
    assert _snapshot(workdir) == before


# -- child ----------------------------------------------------------------------------------------

Mutation = tuple[Any, ...]

HOSTILE_PATHS = [
    "{secret}",
    "../outside/secret",
    "../../outside/secret",
    "rank_0/../../outside/secret",
    "../outside/proj_weight",
    "/dev/zero",
    "/proc/self/mem",
    "/etc/passwd",
    "proj_weight\0x",
    "x" * 5000,
    "",
    ".",
    "..",
    "link",
    "dirlink/proj_weight",
    "fifo",
    "loop",
    "/",
]
DIMS = [-5, -2, -1, 0, 1, 2, 3, 4, 10**12, 2**40, 2**62]


def _child(root: Path, kind: str) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from npu_graph_export import NpuGraphExportError, runtime
    from npu_graph_export._proto import ge_ir_pb2 as ge
    from npu_graph_export.cli import main

    # The runtime's own output of the unmutated models (it matches torch to rounding).
    sources = ("files", "embedded", "shapes")
    reference = {where: runtime.load(root / where).run(X)[0] for where in sources}
    for where, expected in reference.items():
        torch_result = np.load(root / ("shapes.npy" if where == "shapes" else "reference.npy"))
        np.testing.assert_allclose(expected, torch_result, rtol=1e-5)
    case = root / "case"
    current = root / "current"
    dtypes = sorted(ge.DataType.values())
    counter = [0]

    def fresh(source: str) -> ge.ModelDef:
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(root / source, case, symlinks=True)
        (case / "link").symlink_to(root / "outside" / "secret")
        (case / "dirlink").symlink_to(root / "outside", target_is_directory=True)
        os.mkfifo(case / "fifo")
        (case / "loop").symlink_to("loop")
        model = ge.ModelDef()
        model.ParseFromString((case / "export.air").read_bytes())
        return model

    def save(model: ge.ModelDef) -> None:
        (case / "export.air").write_bytes(model.SerializeToString())

    def pick(items: list[Any], index: int) -> Any:
        return items[index % len(items)] if items else None

    def outcome() -> list[Any] | None:
        try:
            outputs = runtime.load(case, max_bytes=BUDGET).run(X)
        except NpuGraphExportError as error:
            message = str(error)
            assert message, "an empty error message"
            assert "\n" not in message, message
            return None
        return list(outputs)

    def apply_strict(model: ge.ModelDef, mutation: Mutation) -> None:
        graph = model.graph[0]
        ops = list(graph.op)
        kind_, a, b, c = mutation
        if kind_ == "path":
            files = [op for op in ops if op.type == "FileConstant"]
            recorded = pick(HOSTILE_PATHS, b).format(secret=root / "outside" / "secret")
            if files:
                pick(files, a).attr["file_path"].s = recorded.encode("utf-8", "surrogatepass")
        elif kind_ == "huge_weight":
            files = [op for op in ops if op.type == "FileConstant"]
            if files:
                op = pick(files, a)
                name = Path(op.attr["file_path"].s.decode()).name
                count = max(1, int(np.prod(op.attr["shape"].list.i)))
                itemsize = (case / name).stat().st_size // count
                del op.attr["shape"].list.i[:]
                op.attr["shape"].list.i.append(2**b)
                with open(case / name, "r+b") as handle:  # sparse: no disk space
                    handle.truncate(itemsize * 2**b)
        elif kind_ == "weight_size":
            files = sorted(p for p in case.iterdir() if p.is_file() and p.suffix == "")
            files = [p for p in files if not p.is_symlink() and p.name not in {"fifo"}]
            if files:
                target = pick(files, a)
                size = target.stat().st_size
                with open(target, "r+b") as handle:
                    handle.truncate(max(0, size + pick([-size, -4, -1, 1, 4, 2**30], b)))
        elif kind_ == "data_dims":
            data = [op for op in ops if op.type == "Data"]
            dims = data[0].output_desc[0].shape.dim
            del dims[:]
            dims.extend(pick(DIMS, d) for d in c)
        elif kind_ in {"out_dtype", "in_dtype"}:
            op = pick(ops, a)
            descs = op.output_desc if kind_ == "out_dtype" else op.input_desc
            if descs:
                pick(list(descs), b).dtype = pick(dtypes, c)
        elif kind_ == "const_dtype":
            consts = [op for op in ops if op.type == "Const"]
            if consts:
                pick(consts, a).attr["value"].t.desc.dtype = pick(dtypes, b)
        elif kind_ == "data_index":
            data = [op for op in ops if op.type == "Data"]
            data[0].attr["index"].i = b - 2

    def apply_loose(model: ge.ModelDef, mutation: Mutation) -> bytes | None:
        graph = model.graph[0]
        ops = list(graph.op)
        kind_, a, b, c = mutation
        if kind_ == "attr_int":
            op = pick(ops, a)
            keys = sorted(op.attr.keys())
            if keys:
                attr = op.attr[pick(keys, b)]
                if attr.HasField("i"):
                    attr.i = c
                elif attr.list.i:
                    attr.list.i[b % len(attr.list.i)] = c
        elif kind_ == "rewire":
            op = pick(ops, a)
            if op.input:
                producer = pick(ops, b)
                op.input[c % len(op.input)] = f"{producer.name}:{c % 3}"
        elif kind_ == "const_dims":
            consts = [op for op in ops if op.type == "Const"]
            if consts:
                dims = pick(consts, a).attr["value"].t.desc.shape.dim
                del dims[:]
                dims.extend(pick(DIMS, d) for d in c)
        elif kind_ == "const_value":
            # Shape, axis and count operands: a 10^12 in a Fill or BroadcastTo shape.
            consts = [
                op
                for op in ops
                if op.type == "Const"
                and op.attr["value"].t.desc.dtype in {ge.DT_INT32, ge.DT_INT64}
            ]
            if consts:
                tensor = pick(consts, a).attr["value"].t
                dtype = np.dtype("<i4" if tensor.desc.dtype == ge.DT_INT32 else "<i8")
                count = len(tensor.data) // dtype.itemsize
                limits = np.iinfo(dtype)
                values = [min(max(pick(DIMS, d), limits.min), limits.max) for d in c]
                values = (values * count)[:count] if values else [0] * count
                tensor.data = np.array(values, dtype).tobytes()
        elif kind_ == "bytes":
            data = bytearray(model.SerializeToString())
            for position, byte in c:
                if data:
                    data[position % len(data)] ^= byte or 1
            return bytes(data)
        return None

    source = st.sampled_from(sources)
    small = st.integers(0, 63)
    settings_ = settings(
        max_examples=EXAMPLES[kind],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )

    def record(text: str) -> None:
        counter[0] += 1
        current.write_text(text)

    strict = st.one_of(
        st.tuples(st.just("path"), small, small, st.just(0)),
        st.tuples(st.just("huge_weight"), small, st.integers(18, 40), st.just(0)),
        st.tuples(st.just("data_dims"), small, small, st.lists(small, max_size=4)),
        st.tuples(st.just("weight_size"), small, small, st.just(0)),
        st.tuples(st.just("out_dtype"), small, small, small),
        st.tuples(st.just("in_dtype"), small, small, small),
        st.tuples(st.just("const_dtype"), small, small, st.just(0)),
        st.tuples(st.just("data_index"), small, st.integers(0, 5), st.just(0)),
    )
    loose = st.one_of(
        st.tuples(st.just("attr_int"), small, small, st.integers(-(2**40), 2**40)),
        st.tuples(st.just("rewire"), small, small, small),
        st.tuples(st.just("const_dims"), small, small, st.lists(small, max_size=4)),
        st.tuples(st.just("const_value"), small, small, st.lists(small, min_size=1, max_size=4)),
        st.tuples(
            st.just("bytes"),
            small,
            small,
            st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1),
        ),
    )

    def run_strict(where: str, mutation: Mutation) -> None:
        record(repr((where, mutation)))
        model = fresh(where)
        apply_strict(model, mutation)
        save(model)
        outputs = outcome()
        if outputs is not None:
            assert len(outputs) == 1, outputs
            assert np.array_equal(outputs[0], reference[where]), (mutation, outputs[0])

    def run_loose(where: str, mutation: Mutation) -> None:
        record(repr((where, mutation)))
        model = fresh(where)
        raw = apply_loose(model, mutation)
        if raw is None:
            save(model)
        else:
            (case / "export.air").write_bytes(raw)
        outcome()

    def cli(argv: list[str]) -> None:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
                if isinstance(exit_.code, str):
                    err.write(exit_.code + "\n")
        lines = err.getvalue().strip().splitlines()
        assert code in (0, 1, 2), (code, err.getvalue())
        if code:
            assert lines, "failed without a message"
            assert "Traceback" not in err.getvalue(), err.getvalue()
            assert len([line for line in lines if not line.startswith("usage:")]) == 1, lines

    npy_header = st.fixed_dictionaries(
        {
            "descr": st.sampled_from(["<f4", "<f8", "<i8", "|b1", "<c8", ">f4", "|O", "<U3", "V8"]),
            "fortran_order": st.booleans(),
            "shape": st.lists(st.sampled_from([0, 1, 2, 4, 3, 10**12, 2**28]), max_size=3).map(
                tuple
            ),
        }
    )

    def run_cli(where: str, mutation: Mutation, header: dict[str, Any], keep: int) -> None:
        record(repr((where, mutation, header, keep)))
        model = fresh(where)
        apply_strict(model, mutation)
        save(model)
        # Random inputs sized from the (mutated) model ...
        cli(["run", str(case), "--max-bytes", str(BUDGET), "--seed", str(keep)])
        # ... and an .npy whose header may declare anything.
        npy = case / "x.npy"
        with open(npy, "wb") as handle:
            np.lib.format.write_array_header_1_0(handle, header)
            handle.write(X.tobytes()[:keep])
            declared = int(np.prod(header["shape"])) * np.dtype(header["descr"]).itemsize
            if 2**20 < declared <= 2**40 and keep % 2:
                handle.truncate(handle.tell() + declared)  # a sparse file that has it all
        cli(["run", str(case), "--input", str(npy), "--max-bytes", str(BUDGET)])

    tests: dict[str, Callable[[], None]] = {
        "strict": settings_(given(source, strict)(run_strict)),
        "loose": settings_(given(source, loose)(run_loose)),
        "cli": settings_(given(source, strict, npy_header, st.integers(0, 40))(run_cli)),
    }
    tests[kind]()
    print(f"ran {counter[0]} examples")


if __name__ == "__main__":
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    _child(Path(sys.argv[1]), sys.argv[2])
