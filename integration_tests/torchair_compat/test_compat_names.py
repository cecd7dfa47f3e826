"""Every "Public names" row of the README, as a TorchAir user script with the imports renamed.

The scripts follow TorchAir's system tests (``tests/st/torchair_aclgraph_st.py``,
``torchair_scope_st.py``, ``torchair_export_st.py``) and its documentation pages: the model and
the calls are the user's, only ``torchair`` -> ``npu_compile`` and ``npu`` -> the available device
change. Each check states what the user relies on: numbers equal eager, the option took effect,
or the refusal says why.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import npu_compile as torchair
import npu_mempool
import pytest
import torch
from npu_compile import CompilerConfig
from npu_compile.configs.compiler_config import CompilerConfig as DeepCompilerConfig
from npu_compile.core.utils import logger

from ._readme import table

ROWS = table("### Public names")
CHECKS: dict[str, Callable[..., None]] = {}


def covers(row_start: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a check as the one for the README row whose name cell starts with ``row_start``."""

    def register(function: Callable[..., None]) -> Callable[..., None]:
        CHECKS[row_start] = function
        return function

    return register


def _compile(model: torch.nn.Module, config: CompilerConfig, **kwargs: Any) -> Any:
    backend = torchair.get_npu_backend(compiler_config=config, **kwargs)
    return torch.compile(model, backend=backend, dynamic=False)


# ---- config, backend, options, logger ------------------------------------------------------------


@covers("`torchair.CompilerConfig`")
def check_compiler_config(device: torch.device) -> None:
    assert DeepCompilerConfig is torchair.CompilerConfig
    config = CompilerConfig()
    config.mode.value = "reduce-overhead"  # as TorchAir's tests write it
    config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
    assert config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass.value == "1"
    assert config == config.copy()
    assert hash(config) == hash(config.copy())
    with pytest.raises(torchair.ConfigError, match="cannot be deleted"):
        del config.mode
    with pytest.raises(torchair.ConfigError, match="must be a dict"):
        config.with_options(None)


@covers("`torchair.get_npu_backend(")
def check_get_npu_backend(device: torch.device) -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.silu(x) + 1

    def silu_as_relu(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    config = CompilerConfig()
    config.mode = "reduce-overhead"
    model = _compile(
        Model(), config, custom_decompositions={torch.ops.aten.silu.default: silu_as_relu}
    )
    x = torch.tensor([-1.0, 2.0], device=device)
    with torch.no_grad():
        out = model(x)
    assert out.tolist() == [1.0, 3.0]  # relu + 1: the decomposition was used


@covers("`torch.compile(..., options={...})`")
def check_compile_options(device: torch.device) -> None:
    seen: list[str] = []

    def _custom_pre_fn(gm: Any, example_inputs: Any, compile_config: Any) -> None:
        seen.append("pre")

    def _custom_post_fn(gm: Any, example_inputs: Any, compile_config: Any) -> None:
        seen.append("post")

    options = {
        "static_kernel_compile": False,
        "inplace_pass": False,
        "input_inplace_pass": False,
        "remove_noop_ops": False,
        "force_eager": False,
        "clone_input": False,
        "frozen_parameter": False,
        "post_grad_custom_pre_pass": _custom_pre_fn,
        "post_grad_custom_post_pass": _custom_post_fn,
        "use_graph_pool": npu_mempool.graph_pool_handle(device),
        "reuse_graph_pool_in_same_fx": False,
        "capture_limit": 64,
        "clone_output": False,
        "dump_tensor_data": False,
        "data_dump_stage": "optimized",
        "data_dump_dir": "./",
    }
    model = torch.compile(torch.nn.Tanh(), backend="npu_compile", options=options)
    x = torch.ones(3, device=device)
    with torch.no_grad():
        torch.testing.assert_close(model(x), torch.tanh(x))
    assert seen == ["pre", "post"]
    bad = torch.compile(torch.nn.Tanh(), backend="npu_compile", options={"capture_limits": 3})
    with pytest.raises(Exception, match="Did you mean 'capture_limit'"), torch.no_grad():
        bad(x)


@covers("`torchair.dynamo_export(")
def check_dynamo_export(device: torch.device, tmp_path: Path) -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear1 = torch.nn.Linear(2, 2)
            self.linear2 = torch.nn.Linear(2, 2)
            for param in self.parameters():
                torch.nn.init.ones_(param)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.linear1(x) + self.linear2(y)

    config = CompilerConfig()
    config.export.experimental.enable_record_nn_module_stack = True
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    torchair.dynamo_export(x, y, model=Model(), export_path=str(tmp_path / "out"), config=config)
    assert (tmp_path / "out" / "export.air").is_file()
    assert "nn_module_stack" in (tmp_path / "out" / "dynamo.pbtxt").read_text()
    config.experimental_config.frozen_parameter = True
    with pytest.raises(torchair.ConfigError, match="frozen_parameter"):
        torchair.dynamo_export(x, y, model=Model(), export_path=str(tmp_path / "f"), config=config)
    assert not (tmp_path / "f").exists()
    lite = CompilerConfig()
    lite.export.experimental.enable_lite_export = True
    with pytest.warns(torchair.NoEffectWarning, match="enable_lite_export"):
        torchair.dynamo_export(x, y, model=Model(), export_path=str(tmp_path / "l"), config=lite)


@covers("`torchair.core.utils.logger`")
def check_logger(device: torch.device, caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    assert logger is torchair.logger
    config = CompilerConfig()
    config.debug.graph_dump.type = "py"  # logs where the dump went
    config.debug.graph_dump.path = str(tmp_path)
    with caplog.at_level(logging.DEBUG, logger="npu_compile"), torch.no_grad():
        _compile(torch.nn.ReLU(), config)(torch.ones(2, device=device))
    assert any("graph dump of" in record.getMessage() for record in caplog.records)


@covers("`torch.npu.graph_pool_handle()`")
def check_pool_tuple(device: torch.device) -> None:
    # What torch.npu.graph_pool_handle() / torch.cuda.graph_pool_handle() return: two ints.
    pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else (1234, 0)
    config = CompilerConfig()
    config.mode = "reduce-overhead"
    config.aclgraph_config.use_custom_pool = pool
    first, second = _compile(torch.nn.ReLU(), config), _compile(torch.nn.Sigmoid(), config)
    x = torch.tensor([-1.0, 0.0, 1.0], device=device)
    with torch.no_grad():
        torch.testing.assert_close(first(x), torch.relu(x))
        torch.testing.assert_close(second(x), torch.sigmoid(x))
    assert torchair.graph_pool_handle is npu_mempool.graph_pool_handle


@covers("`torch.compiler.cudagraph_mark_step_begin()`")
def check_mark_step_begin(device: torch.device) -> None:
    # A decode loop that keeps the previous step's output while calling the next one, as
    # TorchAir users write it; with torch's step marker it replays one graph in one pool.
    config = CompilerConfig()
    config.mode = "reduce-overhead"
    backend = torchair.get_npu_backend(compiler_config=config)
    model = torch.nn.Linear(4, 4).to(device)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad():
        out = None
        for _ in range(4):
            torch.compiler.cudagraph_mark_step_begin()
            x = torch.randn(2, 4, device=device)
            out = compiled(x)
            torch.testing.assert_close(out, model(x))
    (runner,) = backend.stats.runners
    assert runner.counters.recapture_reasons == {}
    assert torchair.mark_step_begin is npu_mempool.mark_step_begin


# ---- streams and events ------------------------------------------------------------------------


@covers("`torchair.scope.npu_stream_switch(")
def check_stream_switch(device: torch.device) -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
            a = torch.mm(x, y)
            with torchair.scope.npu_stream_switch("compat-1", 3):
                b = torch.add(x, y)
            with torchair.scope.npu_stream_switch("compat-2", stream_priority=0):
                c = torch.abs(x)
            return a, b, c

    x, y = torch.randn(4, 4, device=device), torch.randn(4, 4, device=device)
    with torch.no_grad():
        outs = _compile(Model(), CompilerConfig())(x, y)
    for got, want in zip(outs, (x @ y, x + y, x.abs()), strict=True):
        torch.testing.assert_close(got, want)
    with pytest.raises(Exception, match="already exists with priority 3"):  # noqa: SIM117
        with torchair.scope.npu_stream_switch("compat-1", 0):
            pass
    with pytest.warns(UserWarning, match="enable_inner_parallel"):  # noqa: SIM117
        with torchair.scope.npu_stream_switch("compat-3", 0, enable_inner_parallel=False):
            pass


@covers("`torchair.ops.npu_create_tagged_event(tag)`")
def check_tagged_event_methods(device: torch.device) -> None:
    event = torchair.ops.npu_create_tagged_event(tag="compat-ev")
    with torchair.scope.npu_stream_switch("compat-ev-stream"):
        event.record()
    event.wait()
    event.synchronize()
    assert event.query() is True
    with pytest.raises(ValueError, match="already exists"):
        torchair.ops.npu_create_tagged_event(tag="compat-ev")


@covers("`torchair.ops.npu_tagged_event_record(event)`")
def check_tagged_events_in_graph(device: torch.device) -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tagged_event1 = torchair.ops.npu_create_tagged_event(tag="compat-66")

        def forward(self, in1: torch.Tensor, in2: torch.Tensor) -> tuple[torch.Tensor, ...]:
            add_result = torch.add(in1, in2)
            torchair.ops.npu_tagged_event_record(self.tagged_event1)
            with torchair.scope.npu_stream_switch("compat-side"):
                torchair.ops.npu_tagged_event_wait(self.tagged_event1)
                mm_result = torch.mm(add_result, in2)
            return add_result, mm_result

    x, y = torch.randn(4, 4, device=device), torch.randn(4, 4, device=device)
    model = Model()
    with torch.no_grad():
        compiled = torch.compile(
            model, backend=torchair.get_npu_backend(), dynamic=False, fullgraph=True
        )
        for _ in range(2):
            _add_result, mm_result = compiled(x, y)
    torch.testing.assert_close(mm_result, (x + y) @ y)


@covers("`torchair.ops.npu_record_tagged_stream(")
def check_record_tagged_stream(device: torch.device) -> None:
    class Model(torch.nn.Module):
        def forward(self, in3: torch.Tensor, in4: torch.Tensor) -> torch.Tensor:
            with torchair.scope.npu_stream_switch("compat-rs"):
                B = in3 + in4
            torchair.ops.npu_record_tagged_stream(input=B, tagged_stream="compat-rs")
            return torch.mm(B, in4)

    x, y = torch.randn(4, 4, device=device), torch.randn(4, 4, device=device)
    with torch.no_grad():
        out = _compile(Model(), CompilerConfig())(x, y)
    torch.testing.assert_close(out, (x + y) @ y)


@covers("`torchair.ops.record()`")
def check_record_wait(device: torch.device) -> None:
    # TorchAir's test_npu_stream_record_wait_with_record_wait, with the imports renamed.
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mm = torch.mm(x, x)
            result1 = torchair.ops.record()
            with torchair.scope.npu_stream_switch("rw-1", 3):
                torchair.ops.wait([result1])
                abs1 = torch.abs(mm)
            with torchair.scope.npu_stream_switch("rw-2", 3):
                torchair.ops.wait([abs1])
                add1 = torch.add(abs1, 1)
                result3 = torchair.ops.record()
            with torchair.scope.npu_stream_switch("rw-3", 3):
                torchair.ops.wait([abs1, result3])
                sub = torch.sub(abs1, add1)
            return sub

    config = CompilerConfig()
    config.mode = "reduce-overhead"
    config.debug.aclgraph.clone_input = False
    config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
    graphs: list[list[str]] = []
    config.post_grad_custom_post_pass = lambda gm, inputs, cfg: graphs.append(
        [str(n.target) for n in gm.graph.nodes]
    )
    x = torch.randn(3, 3, device=device)
    with torch.no_grad():
        out = _compile(Model(), config)(x)
    torch.testing.assert_close(out, torch.full((3, 3), -1.0, device=device))
    assert graphs[0].count("npu_streams.record.default") == 2
    assert graphs[0].count("npu_streams.wait.default") == 3


@covers("reinplace passes with streams")
def check_reinplace_with_streams(device: torch.device, tmp_path: Path) -> None:
    # After TorchAir's test_reinplace_pass_disblabled_with_multi_stream (imports renamed), with a
    # KV-cache write as the in-place update; the graph that runs is read from the text dump.
    class Model(torch.nn.Module):
        def __init__(self, streams: bool) -> None:
            super().__init__()
            self.streams = streams

        def forward(self, x: torch.Tensor, y: torch.Tensor, pos: torch.Tensor) -> Any:
            b = x.clone().add(1)
            if self.streams:
                with torchair.scope.npu_stream_switch("reinplace-1", 3):
                    y.index_put_((pos,), x[:2])
            else:
                y.index_put_((pos,), x[:2])
            return b, y

    for streams in (True, False):
        folder = tmp_path / str(streams)
        config = CompilerConfig()
        config.mode = "reduce-overhead"
        config.debug.aclgraph.clone_input = False
        config.experimental_config.keep_inference_input_mutations = True
        config.debug.graph_dump.type = "txt"
        config.debug.graph_dump.path = str(folder)
        x, y = torch.randn(8, 8, device=device), torch.zeros(8, 8, device=device)
        pos = torch.tensor([1, 5], device=device)
        with torch.no_grad():
            b, _y_out = _compile(Model(streams), config)(x, y, pos)
        torch.testing.assert_close(b, x + 1)
        torch.testing.assert_close(y[pos], x[:2])
        (dump,) = folder.glob("*.txt")
        graph = dump.read_text()
        # As TorchAir's test: the write goes into `y` directly with or without a stream scope
        # (the input-mutation pass runs; only intermediates are left alone with streams).
        assert "aten.index_put_.default" in graph
        assert "aten.copy_.default" not in graph


@covers("`config.npugraphex_config`")
def check_npugraphex_config(device: torch.device) -> None:
    with pytest.raises(torchair.UnknownOptionError, match=r"pass options= to torch\.compile"):
        _ = CompilerConfig().npugraphex_config


# ---- accepted with no effect -------------------------------------------------------------------


@covers("`torchair.scope.npu_wait_tensor(")
def check_npu_wait_tensor(device: torch.device) -> None:
    # TorchAir's test_npu_stream_switch_no_support_npu_wait_tensor_with_reduce_over_head, which
    # TorchAir refuses in reduce-overhead mode; here the waits order the side streams.
    class Model(torch.nn.Module):
        def forward(self, in1: Any, in2: Any, in3: Any, in4: Any) -> tuple[torch.Tensor, ...]:
            add_result = torch.add(in1, in2)
            with torchair.scope.npu_stream_switch("wt-1", 3):
                torchair.scope.npu_wait_tensor(in4, add_result)
                mm_result1 = torch.mm(in3, in4)
                with torchair.scope.npu_stream_switch("wt-2", 3):
                    torchair.scope.npu_wait_tensor(in3, add_result)
                    mm_result2 = torch.mm(in3, in4)
            return add_result, mm_result1, mm_result2

    config = CompilerConfig()
    config.mode = "reduce-overhead"
    config.debug.aclgraph.clone_input = False
    ins = [torch.randn(2, 2, device=device) for _ in range(4)]
    with torch.no_grad():
        outs = _compile(Model(), config)(*ins)
    expected = (ins[0] + ins[1], ins[2] @ ins[3], ins[2] @ ins[3])
    for got, want in zip(outs, expected, strict=True):
        torch.testing.assert_close(got, want)


def _no_effect_scopes_check(scopes: dict[str, Callable[[], Any]]) -> Callable[..., None]:
    def check(device: torch.device) -> None:
        import npu_compile._scopes

        for name, make in scopes.items():
            npu_compile._scopes._warned.discard(name)

            def fn(x: torch.Tensor, make: Callable[[], Any] = make) -> torch.Tensor:
                with make():
                    return x * 2

            compiled = torch.compile(fn, backend=torchair.get_npu_backend(), fullgraph=True)
            with pytest.warns(torchair.NoEffectWarning, match=rf"scope\.{name} has no effect"):
                out = compiled(torch.ones(2, device=device))
            assert out.tolist() == [2.0, 2.0]
        with pytest.raises(TypeError, match="must be bool"):
            torchair.scope.op_never_timeout(1)  # type: ignore[arg-type]

    return check


CHECKS["`torchair.scope.limit_core_num("] = _no_effect_scopes_check(
    {
        "limit_core_num": lambda: torchair.scope.limit_core_num(4, 8),
        "super_kernel": lambda: torchair.scope.super_kernel("sk", "stream-fusion=1"),
        "data_dump": lambda: torchair.scope.data_dump(),
    }
)
CHECKS["`torchair.scope.op_never_timeout("] = _no_effect_scopes_check(
    {"op_never_timeout": lambda: torchair.scope.op_never_timeout(True)}
)


@covers("`torchair.patch_for_hcom()`")
def check_patch_for_hcom(device: torch.device) -> None:
    with pytest.warns(torchair.NoEffectWarning, match="traces torch.distributed"):
        torchair.patch_for_hcom()


# ---- refused names -----------------------------------------------------------------------------

REFUSED = {
    "`torchair.ops.npu_fused_infer_attention_score`": [
        ("ops", "npu_fused_infer_attention_score"),
        ("ops", "npu_fused_infer_attention_score_v2"),
    ],
    "`torchair.ops.npu_print`": [("ops", "npu_print")],
    "`torchair.get_compiler`": [("", "get_compiler")],
    "`torchair.register_fx_node_ge_converter`": [("", "register_fx_node_ge_converter"), ("", "ge")],
    "`torchair.register_replacement`": [("", "register_replacement")],
    "`torchair.use_internal_format_weight`": [
        ("", "use_internal_format_weight"),
        ("", "npu_format_cast_via_cpu"),
    ],
    "`torchair.inference`": [("", "inference"), ("", "llm_datadist")],
}


def _refused_check(names: list[tuple[str, str]]) -> Callable[..., None]:
    def check(device: torch.device) -> None:
        for module, name in names:
            owner = getattr(torchair, module) if module else torchair
            with pytest.raises(torchair.UnsupportedApiError, match=rf"\.{name} .*not provided: "):
                getattr(owner, name)
            assert not hasattr(owner, name)

    return check


for _row, _names in REFUSED.items():
    CHECKS[_row] = _refused_check(_names)


def _row_key(name_cell: str) -> str:
    matches = [key for key in CHECKS if name_cell.startswith(key)]
    assert len(matches) == 1, f"README row {name_cell!r} has {len(matches)} checks"
    return matches[0]


def test_every_row_has_one_check() -> None:
    keys = [_row_key(row[0]) for row in ROWS]
    assert sorted(keys) == sorted(CHECKS)


@pytest.mark.parametrize("row", ROWS, ids=[row[0][:40] for row in ROWS])
def test_public_name_row(
    row: list[str],
    device: torch.device,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import npu_streams._runtime

    # Tags are process-wide; each script starts with none taken.
    monkeypatch.setattr(npu_streams._runtime, "_cpu_priorities", {})
    monkeypatch.setattr(npu_streams._ops, "_inner_parallel_warned", False)
    check = CHECKS[_row_key(row[0])]
    status = row[1]
    assert status in ("implemented", "accepted, no effect", "refused")
    kwargs: dict[str, Any] = {"device": device}
    code = check.__code__
    if "tmp_path" in code.co_varnames[: code.co_argcount]:
        kwargs["tmp_path"] = tmp_path
    if "caplog" in code.co_varnames[: code.co_argcount]:
        kwargs["caplog"] = caplog
    if status == "accepted, no effect":
        check(**kwargs)  # asserts its own warning
        return
    with warnings.catch_warnings():
        # A script that is not about warnings must not trigger NoEffectWarning.
        warnings.simplefilter("error", torchair.NoEffectWarning)
        check(**kwargs)
