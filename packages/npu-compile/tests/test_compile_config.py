import copy
import pickle

import npu_mempool
import pytest
from npu_compile import CompilerConfig, ConfigError, UnknownOptionError
from npu_compile.configs.compiler_config import NPUGRAPH_EX_OPTIONS
from npu_compile.configs.compiler_config import CompilerConfig as DeepPathConfig


def test_defaults_follow_torchair() -> None:
    config = CompilerConfig()
    assert config.mode == "reduce-overhead"
    assert config.aclgraph_config.use_custom_pool is None
    assert config.get("debug.aclgraph.disable_mempool_reuse_in_same_fx") is False
    assert config.get("debug.aclgraph.clone_input") is True
    assert config.get("debug.aclgraph.enable_output_clone") is False
    assert config.debug.aclgraph.static_capture_size_limit == 64
    assert config.get("debug.run_eagerly") is False
    assert config.get("experimental_config.frozen_parameter") is False
    assert config.get("experimental_config.aclgraph._aclnn_static_shape_kernel") is False
    assert config.experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir is None
    assert config.get("export.experimental.auto_atc_config_generated") is False
    assert config.get("export.experimental.enable_record_nn_module_stack") is False
    assert DeepPathConfig is CompilerConfig


def test_seed_assignments_are_accepted() -> None:
    config = CompilerConfig()
    config.mode = "reduce-overhead"
    pool = npu_mempool.graph_pool_handle("cpu")
    config.aclgraph_config.use_custom_pool = pool
    config.debug.aclgraph.disable_mempool_reuse_in_same_fx = True
    config.debug.aclgraph.clone_input = False
    config.debug.aclgraph.enable_output_clone = True
    config.experimental_config.aclgraph._aclnn_static_shape_kernel = True
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir = "/path/test"
    config.export.experimental.auto_atc_config_generated = True
    config.export.experimental.enable_record_nn_module_stack = True
    assert config.as_dict()["debug.aclgraph.clone_input"] is False
    assert config.aclgraph_config.use_custom_pool is pool


def test_unknown_name_lists_valid_names_and_suggests() -> None:
    config = CompilerConfig()
    with pytest.raises(UnknownOptionError) as info:
        config.debug.aclgraph.clone_inputs = False  # type: ignore[attr-defined]
    message = str(info.value)
    assert "debug.aclgraph has no option 'clone_inputs'" in message
    assert "Did you mean 'clone_input'?" in message
    assert "enable_output_clone" in message
    assert "static_capture_size_limit" in message
    # Both builtin families, so generic handlers and getattr defaults work.
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, AttributeError)
    assert info.value.code == "config-unknown-option"


def test_unknown_read_is_an_attribute_error() -> None:
    config = CompilerConfig()
    assert getattr(config.debug, "no_such_thing", "fallback") == "fallback"
    assert not hasattr(config, "modee")
    with pytest.raises(UnknownOptionError, match="Did you mean 'mode'"):
        _ = config.modee  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("path", "value", "allowed"),
    [
        ("debug.aclgraph.clone_input", 1, "True or False"),
        ("debug.aclgraph.clone_input", "1", "True or False"),
        ("debug.run_eagerly", None, "True or False"),
        ("debug.aclgraph.static_capture_size_limit", 0, "int in [1,"),
        ("debug.aclgraph.static_capture_size_limit", True, "int in [1,"),
        ("debug.aclgraph.static_capture_size_limit", 2.0, "int in [1,"),
        ("mode", "fast", "'reduce-overhead', 'npugraph_ex', 'max-autotune'"),
        ("aclgraph_config.use_custom_pool", 3, "graph_pool_handle"),
        ("aclgraph_config.use_custom_pool", (0, "7"), "torch.cuda.graph_pool_handle()"),
        ("aclgraph_config.use_custom_pool", (0, 1, 2), "torch.npu.graph_pool_handle()"),
        ("experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir", "", "directory path"),
        # Refused when assigned, not at the first compile (where it fell back with a reason
        # that buried the cause).
        ("experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir", "a\0b", "NUL byte"),
        ("experimental_config.aclgraph._aclnn_static_shape_kernel_fallback_dir", "\0", "NUL"),
    ],
)
def test_wrong_values_name_what_is_allowed(path: str, value: object, allowed: str) -> None:
    config = CompilerConfig()
    before = config.get(path)
    with pytest.raises(ConfigError) as info:
        config.set(path, value)
    assert path in str(info.value)
    assert allowed in str(info.value)
    assert config.get(path) == before  # a refused value leaves the option unchanged


def test_max_autotune_is_accepted_by_the_config_and_refused_by_the_backend() -> None:
    from npu_compile import BackendError, get_npu_backend

    config = CompilerConfig()
    config.mode = "max-autotune"  # TorchAir's default: a script may set it explicitly
    with pytest.raises(BackendError, match=r"Graph Engine.*runs reduce-overhead.*instead"):
        get_npu_backend(compiler_config=config)
    config.mode = "npugraph_ex"  # TorchAir's alias of reduce-overhead
    assert config.mode == "npugraph_ex"
    get_npu_backend(compiler_config=config)


def test_groups_cannot_be_replaced() -> None:
    config = CompilerConfig()
    with pytest.raises(ConfigError, match=r"group of options.*run_eagerly"):
        config.debug = None  # type: ignore[assignment]


def test_path_like_build_dir_is_stored_as_str(tmp_path: object) -> None:
    config = CompilerConfig()
    config.experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir = tmp_path  # type: ignore[assignment]
    assert config.experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir == str(tmp_path)


def test_equal_by_value_and_usable_as_cache_key() -> None:
    a, b = CompilerConfig(), CompilerConfig()
    assert a == b
    assert hash(a) == hash(b)
    a.debug.aclgraph.enable_output_clone = True
    assert a != b
    b.debug.aclgraph.enable_output_clone = True
    assert a == b
    assert hash(a) == hash(b)
    cache = {a: "compiled"}
    assert cache[b] == "compiled"
    assert a != object()


def test_copies_are_independent_and_roundtrip() -> None:
    config = CompilerConfig()
    config.debug.aclgraph.static_capture_size_limit = 8
    for clone in (config.copy(), copy.copy(config), copy.deepcopy(config)):
        assert clone == config
        assert clone is not config
        clone.debug.aclgraph.static_capture_size_limit = 9
        assert config.debug.aclgraph.static_capture_size_limit == 8
    assert pickle.loads(pickle.dumps(config)) == config
    assert repr(config) == "CompilerConfig(debug.aclgraph.static_capture_size_limit=8)"


def test_npugraph_ex_options_map_onto_the_tree() -> None:
    base = CompilerConfig()
    derived = base.with_options(
        {
            "reuse_graph_pool_in_same_fx": False,
            "capture_limit": 3,
            "clone_output": True,
            "force_eager": True,
            "frozen_parameter": True,
        }
    )
    assert derived.get("debug.aclgraph.disable_mempool_reuse_in_same_fx") is True
    assert derived.debug.aclgraph.static_capture_size_limit == 3
    assert derived.get("debug.aclgraph.enable_output_clone") is True
    assert derived.get("debug.run_eagerly") is True
    assert derived.get("experimental_config.frozen_parameter") is True
    assert base == CompilerConfig()  # the original is untouched
    assert set(NPUGRAPH_EX_OPTIONS) >= {"use_graph_pool", "clone_input", "static_kernel_compile"}


def test_npugraph_ex_unknown_and_wrong_options() -> None:
    with pytest.raises(UnknownOptionError, match="Did you mean 'capture_limit'"):
        CompilerConfig().with_options({"capture_limits": 3})
    with pytest.raises(ConfigError, match="reuse_graph_pool_in_same_fx must be True or False"):
        CompilerConfig().with_options({"reuse_graph_pool_in_same_fx": "no"})
    with pytest.raises(ConfigError, match="static_capture_size_limit"):
        CompilerConfig().with_options({"capture_limit": -1})


def test_pickle_round_trip_and_a_clear_error_for_pools() -> None:
    config = CompilerConfig()
    config.debug.aclgraph.clone_input = False
    loaded = pickle.loads(pickle.dumps(config))
    assert loaded == config
    assert hash(loaded) == hash(config)
    with pytest.raises(UnknownOptionError):
        loaded.debug.aclgraph.clone_inptu = True  # still validated after loading
    config.aclgraph_config.use_custom_pool = npu_mempool.graph_pool_handle("cpu")
    with pytest.raises(TypeError, match=r"aclgraph_config\.use_custom_pool = None"):
        pickle.dumps(config)


@pytest.mark.parametrize(
    "path",
    [
        "experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir",
        "experimental_config.aclgraph._aclnn_static_shape_kernel_fallback_dir",
    ],
)
def test_a_directory_npu_static_kernel_refuses_is_refused_when_assigned(path: str) -> None:
    # One rule, npu-static-kernel's: a name longer than any file system takes was accepted here
    # before and refused only when the backend was made.
    config = CompilerConfig()
    with pytest.raises(ConfigError, match="directory path") as info:
        config.set(path, "x" * 300)
    assert path in str(info.value)
    assert config.get(path) is None
    config.set(path, "build/kernels")
    assert config.get(path) == "build/kernels"


def test_the_capture_error_modes_are_npu_mempools() -> None:
    config = CompilerConfig()
    for mode in ("global", "thread_local", "relaxed"):
        config.debug.aclgraph.capture_error_mode = mode
        assert config.debug.aclgraph.capture_error_mode == mode
    with pytest.raises(ConfigError, match=r"capture_error_mode.*one of") as info:
        config.debug.aclgraph.capture_error_mode = "loose"
    assert "debug.aclgraph.capture_error_mode" in str(info.value)
