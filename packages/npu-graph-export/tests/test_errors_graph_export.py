import npu_graph_export
import pytest
from npu_graph_export.errors import ExportError, NpuGraphExportError


def test_version_matches_distribution_metadata() -> None:
    from importlib.metadata import version

    assert npu_graph_export.__version__ == version("npu-graph-export")


def test_errors_share_one_root_and_keep_the_builtin() -> None:
    with pytest.raises(ValueError, match="what to do") as info:
        raise ExportError("what went wrong; what to do")
    assert isinstance(info.value, NpuGraphExportError)
    assert info.value.code == "export"
    assert "what to do" in str(info.value)
