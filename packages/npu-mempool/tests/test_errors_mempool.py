import npu_mempool
import pytest
from npu_mempool.errors import CaptureError, NpuMempoolError


def test_version_matches_distribution_metadata() -> None:
    from importlib.metadata import version

    assert npu_mempool.__version__ == version("npu-mempool")


def test_errors_share_one_root_and_keep_the_builtin() -> None:
    with pytest.raises(RuntimeError, match="what to do") as info:
        raise CaptureError("what went wrong; what to do")
    assert isinstance(info.value, NpuMempoolError)
    assert info.value.code == "capture"
    assert "what to do" in str(info.value)
