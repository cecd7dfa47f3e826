import npu_streams
import pytest
from npu_streams.errors import NpuStreamsError, StreamScopeError


def test_version_matches_distribution_metadata() -> None:
    from importlib.metadata import version

    assert npu_streams.__version__ == version("npu-streams")


def test_errors_share_one_root_and_keep_the_builtin() -> None:
    with pytest.raises(RuntimeError, match="what to do") as info:
        raise StreamScopeError("what went wrong; what to do")
    assert isinstance(info.value, NpuStreamsError)
    assert info.value.code == "stream-scope"
    assert "what to do" in str(info.value)
