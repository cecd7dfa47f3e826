"""Every name this package shares with CANN, the Ascend toolkit, in one place.

Op statistics, the Ascend builder and the device adapter speak CANN's vocabulary; the tables and
spellings they need live here so that following a CANN release means editing one module. Each
group says where its names come from:

- **Op types** (:data:`OP_TYPES`, :func:`cann_op_type`): the operator type names of CANN's
  operator library, as its operator reference lists them; an op description file and the
  kernel compiled from it are filed under this name. Only names that differ from the CamelCase
  aten name are listed.
- **Data types** (:data:`DTYPES`, :func:`cann_dtype_name`): the data type names CANN's op
  descriptions use (``float`` is float32, ``double`` float64).
- **Storage formats** (:data:`NPU_FORMATS`, :data:`FORMAT_ND`, :data:`FORMAT_NHWC`): the names of
  CANN's ``aclFormat`` enumeration (``ACL_FORMAT_ND``...), keyed by the enumeration values that
  torch_npu's ``get_npu_format`` returns.
- **Op statistics layout** (:data:`OUTPUTS_DIRNAME`, :func:`outputs_dir_name`,
  :func:`op_file_stem`...): the directory and file names TorchAir writes for CANN's static kernel
  compiler: ``<op type>_<dtype>_<format>_<dims>_<index>.json`` under
  ``aclnn_static_shape_kernel_outputs/<timestamp>_<pid>_outputs/<pid>/``.
- **Toolchain** (:data:`OP_COMPILER`, :data:`LOG_LEVELS`, :data:`RUN_GLOB`...): the static kernel
  compiler's executable and its log levels, the ``static_kernel_<datetime>.run`` packages it
  writes, where an installed package keeps its ``uninstall.sh`` in the OPP (operator package)
  tree, the files that identify the installed CANN version, and the environment variables the
  toolkit's ``set_env.sh`` defines (:data:`ASCEND_HOME_PATH_ENV`,
  :data:`ASCEND_GLOBAL_LOG_LEVEL_ENV`), as CANN's static kernel and environment variable
  documentation describe them.
"""

from __future__ import annotations

import os
import re

import torch

__all__ = [
    "ASCEND_GLOBAL_LOG_LEVEL_ENV",
    "ASCEND_HOME_PATH_ENV",
    "DTYPES",
    "FORMAT_ND",
    "FORMAT_NHWC",
    "LOG_LEVELS",
    "NPU_FORMATS",
    "OP_COMPILER",
    "OP_TYPES",
    "OUTPUTS_DIRNAME",
    "RUN_GLOB",
    "RUN_NAME",
    "UNINSTALL_SCRIPT",
    "VERSION_FILES",
    "cann_dtype_name",
    "cann_op_type",
    "debug_dir_name",
    "npu_format_name",
    "op_file_name",
    "op_file_stem",
    "outputs_dir_name",
    "selected_dir_name",
    "uninstaller_glob",
]

# --- Op types -------------------------------------------------------------------------------

# aten op name (overload and in-place suffix stripped) -> CANN op type, for the ops whose CANN name
# is not simply the CamelCase aten name. Unlisted ops fall back to CamelCase (``native_layer_norm``
# -> ``NativeLayerNorm``), so every op still gets a stable, readable name.
OP_TYPES: dict[str, str] = {
    "mm": "MatMulV2",
    "matmul": "MatMulV2",
    "bmm": "BatchMatMulV2",
    "add": "Add",
    "sub": "Sub",
    "rsub": "Sub",
    "mul": "Mul",
    "div": "RealDiv",
    "neg": "Neg",
    "exp": "Exp",
    "log": "Log",
    "sqrt": "Sqrt",
    "rsqrt": "Rsqrt",
    "pow": "Pow",
    "relu": "Relu",
    "sigmoid": "Sigmoid",
    "tanh": "Tanh",
    "gelu": "Gelu",
    "silu": "Swish",
    "sum": "ReduceSum",
    "mean": "ReduceMean",
    "amax": "ReduceMax",
    "amin": "ReduceMin",
    "softmax": "SoftmaxV2",
    "log_softmax": "LogSoftmaxV2",
    "cat": "ConcatD",
    "permute": "Transpose",
    "transpose": "Transpose",
    "where": "SelectV2",
    "embedding": "GatherV2",
    "index_select": "GatherV2",
    "to_copy": "Cast",
    "native_layer_norm": "LayerNorm",
    "copy": "ViewCopy",
}


def cann_op_type(name: str) -> str:
    """Return the CANN op type name for an aten op name.

    Args:
        name: An op name such as ``"mm"``, ``"aten.mm.default"``, ``"add_"`` or ``"_softmax"``.

    Returns:
        The CANN op type (``"MatMulV2"``, ``"Add"``, ``"SoftmaxV2"``), or the CamelCase op name
        when no CANN name is known.
    """
    parts = name.split(".")
    # ``namespace.name.overload`` (any namespace, custom ops included) or a bare op name.
    base = (parts[1] if len(parts) >= 2 else parts[0]).strip("_")
    mapped = OP_TYPES.get(base)
    if mapped is not None:
        return mapped
    return "".join(word[:1].upper() + word[1:] for word in base.split("_") if word) or "Op"


# --- Data types -----------------------------------------------------------------------------

# torch dtype -> CANN dtype name (``float`` is CANN's name for float32).
DTYPES: dict[torch.dtype, str] = {
    torch.float32: "float",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "double",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.bool: "bool",
    torch.complex64: "complex64",
    torch.complex128: "complex128",
}


def cann_dtype_name(dtype: torch.dtype) -> str:
    """Return CANN's name for ``dtype``; a dtype CANN has no listed name for keeps torch's."""
    return DTYPES.get(dtype, str(dtype).removeprefix("torch."))


# --- Storage formats ------------------------------------------------------------------------

# The format of a plain dense tensor, and the layout a channels-last 4-D tensor really has.
FORMAT_ND = "ND"
FORMAT_NHWC = "NHWC"

# torch_npu's internal format ids (``torch_npu.get_npu_format``) to the CANN format names used in op
# statistics file names; anything else keeps its numeric id so nothing is silently mislabelled.
NPU_FORMATS: dict[int, str] = {
    0: "NCHW",
    1: FORMAT_NHWC,
    2: FORMAT_ND,
    3: "NC1HWC0",
    4: "FRACTAL_Z",
    29: "FRACTAL_NZ",
}


def npu_format_name(format_id: int) -> str:
    """Return the CANN format name of a torch_npu format id (``FORMAT<id>`` when unknown)."""
    return NPU_FORMATS.get(format_id, f"FORMAT{format_id}")


# --- Op statistics layout -------------------------------------------------------------------

OUTPUTS_DIRNAME = "aclnn_static_shape_kernel_outputs"


def outputs_dir_name(stamp: str, pid: int) -> str:
    """The directory of one recording under :data:`OUTPUTS_DIRNAME`: ``<stamp>_<pid>_outputs``."""
    return f"{stamp}_{pid}_outputs"


def selected_dir_name(pid: int) -> str:
    """The compile list inside a recording: ``<pid>`` (what the static kernel compiler reads)."""
    return str(pid)


def debug_dir_name(pid: int) -> str:
    """Every recorded op inside a recording: ``<pid>_debug``."""
    return f"{pid}_debug"


def op_file_stem(op_type: str, dtype: str, fmt: str, shape: list[int]) -> str:
    """An op file name without index: ``<op type>_<dtype>_<format>[_<dims>]``."""
    dims = "_".join(str(d) for d in shape)
    return "_".join([op_type, dtype, fmt] + ([dims] if dims else []))


def op_file_name(stem: str, index: int) -> str:
    """An op file name: the stem, the index among equal stems, ``.json``."""
    return f"{stem}_{index}.json"


# --- Toolchain ------------------------------------------------------------------------------

# The static kernel compiler's executable, looked up on PATH.
OP_COMPILER = "op_compiler"

# The toolkit's install root (``.../ascend-toolkit/latest``), set by its ``set_env.sh``.
ASCEND_HOME_PATH_ENV = "ASCEND_HOME_PATH"
# CANN's log level (0..3; 4 = off).
ASCEND_GLOBAL_LOG_LEVEL_ENV = "ASCEND_GLOBAL_LOG_LEVEL"

# CANN's ASCEND_GLOBAL_LOG_LEVEL (0..3; 4 = off) to op_compiler's -l values.
LOG_LEVELS: dict[str, str] = {"0": "debug", "1": "info", "2": "warning", "3": "error"}

# The packages op_compiler writes: static_kernel_<datetime>.run.
RUN_GLOB = "static_kernel_*.run"
RUN_NAME = re.compile(r"static_kernel_[0-9A-Za-z_]+\.run")

# Files under ASCEND_HOME_PATH whose contents identify the installed CANN version.
VERSION_FILES = ("version.cfg", "version.info")

UNINSTALL_SCRIPT = "uninstall.sh"


def uninstaller_glob(home: str, run_stem: str) -> str:
    """The glob matching the ``uninstall.sh`` an installed ``<run_stem>.run`` leaves behind.

    A ``.run`` package installs into the OPP tree of every toolkit beside ``home``
    (``<home>/../*/opp/static_kernel/ai_core/<run_stem>/``).
    """
    directory = os.path.join(home, "..", "*", "opp", "static_kernel", "ai_core", run_stem)
    return os.path.join(directory, UNINSTALL_SCRIPT)
