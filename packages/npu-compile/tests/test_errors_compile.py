import npu_compile
import pytest
from npu_compile.errors import ConfigError, NpuCompileError


def test_version_matches_distribution_metadata() -> None:
    from importlib.metadata import version

    assert npu_compile.__version__ == version("npu-compile")


def test_errors_share_one_root_and_keep_the_builtin() -> None:
    with pytest.raises(ValueError, match="what to do") as info:
        raise ConfigError("what went wrong; what to do")
    assert isinstance(info.value, NpuCompileError)
    assert info.value.code == "config"
    assert "what to do" in str(info.value)
