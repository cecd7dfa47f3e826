import npu_static_kernel
import pytest
from npu_static_kernel.errors import BuildError, NpuStaticKernelError


def test_version_matches_distribution_metadata() -> None:
    from importlib.metadata import version

    assert npu_static_kernel.__version__ == version("npu-static-kernel")


def test_errors_share_one_root_and_keep_the_builtin() -> None:
    with pytest.raises(RuntimeError, match="what to do") as info:
        raise BuildError("what went wrong; what to do")
    assert isinstance(info.value, NpuStaticKernelError)
    assert info.value.code == "build"
    assert "what to do" in str(info.value)
