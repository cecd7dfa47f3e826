"""Training graphs: forward and backward captured, gradients and optimizer steps equal eager's."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import npu_mempool
import pytest
import torch
from npu_compile import CompilerConfig, FallbackReason, get_npu_backend
from npu_compile.backend import NpuBackend
from npu_mempool import GraphRunner, InputKind, StaleOutputError

Optimizer = Callable[[Any], torch.optim.Optimizer]

OPTIMIZERS: dict[str, Optimizer] = {
    "sgd-momentum": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.01),
}


class Regression(torch.nn.Module):
    """A small MLP whose forward returns the loss (so the loss is an output of the graph)."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(4, 16),
            torch.nn.BatchNorm1d(16),
            torch.nn.Tanh(),
            torch.nn.Dropout(dropout),
            torch.nn.Linear(16, 2),
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.body(x), y)


def _batch(step: int, rows: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    return torch.randn(rows, 4, generator=generator), torch.randn(rows, 2, generator=generator)


def _pair(dropout: float = 0.0) -> tuple[Regression, Regression]:
    torch.manual_seed(0)
    model = Regression(dropout)
    return model, copy.deepcopy(model)


def _assert_same(model: torch.nn.Module, reference: torch.nn.Module) -> None:
    for (name, got), want in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want, msg=name)
        torch.testing.assert_close(got.grad, want.grad, msg=f"grad of {name}")
    for (name, got), want in zip(model.named_buffers(), reference.buffers(), strict=True):
        torch.testing.assert_close(got, want, msg=name)


def _runners(backend: NpuBackend) -> tuple[GraphRunner, GraphRunner]:
    forward, backward = backend.stats.runners
    assert backward.name == f"{forward.name}_backward"
    return forward, backward


def _step(
    compiled: Callable[..., torch.Tensor],
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor],
    seed: int,
) -> float:
    optimizer.zero_grad()
    torch.manual_seed(seed)  # dropout draws the same numbers in both models
    loss = compiled(*batch)
    loss.backward()
    optimizer.step()
    return float(loss.item())


@pytest.fixture
def kinds_spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[InputKind]]:
    """The input kinds each GraphRunner was built with, by runner name."""
    seen: dict[str, list[InputKind]] = {}
    real = npu_mempool.GraphRunner

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, fn: Any, **kwargs: Any) -> None:
            seen[kwargs["name"]] = list(kwargs["input_kinds"])
            super().__init__(fn, **kwargs)

    monkeypatch.setattr(npu_mempool, "GraphRunner", Spy)
    return seen


@pytest.mark.parametrize("make_optimizer", list(OPTIMIZERS.values()), ids=list(OPTIMIZERS))
def test_training_steps_equal_eager_and_replay_both_graphs(
    make_optimizer: Optimizer, caplog: pytest.LogCaptureFixture
) -> None:
    model, reference = _pair(dropout=0.25)
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    optimizer, eager_optimizer = (
        make_optimizer(model.parameters()),
        make_optimizer(reference.parameters()),
    )
    with caplog.at_level(logging.WARNING, logger="npu_compile"):
        for step in range(5):
            batch = _batch(step)
            loss = _step(compiled, optimizer, batch, seed=step)
            assert loss == pytest.approx(_step(reference, eager_optimizer, batch, seed=step))
            _assert_same(model, reference)  # parameters updated in place, grads, BN statistics
    assert [r.getMessage() for r in caplog.records if r.name == "npu_compile"] == []
    assert backend.stats.fallbacks == []
    assert backend.stats.captured == 1  # FX graphs: one, with its backward
    for runner in _runners(backend):
        counters = runner.counters
        assert (counters.captures, counters.replays, counters.eager_calls) == (1, 4, 0)
        # The loop drops the loss and zero_grad drops the gradients: one call path each.
        assert runner.num_paths == 1


def test_saved_parameters_are_read_in_place_and_follow_a_moved_parameter(
    kinds_spy: dict[str, list[InputKind]],
) -> None:
    model, reference = _pair()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    optimizer, eager_optimizer = (
        OPTIMIZERS["sgd-momentum"](model.parameters()),
        OPTIMIZERS["sgd-momentum"](reference.parameters()),
    )
    for step in range(2):
        _step(compiled, optimizer, _batch(step), seed=step)
        _step(reference, eager_optimizer, _batch(step), seed=step)
    _, backward = _runners(backend)
    # The second linear layer's weight is saved for backward (as its transpose, a view):
    # read in place, not copied. Saved activations and the loss's gradient are copied in.
    kinds = kinds_spy[backward.name]
    assert InputKind.PARAMETER in kinds
    assert InputKind.USER in kinds
    assert InputKind.MUTATED not in kinds
    # The parameters move to new memory: both graphs see the new addresses.
    with torch.no_grad():
        for got, want in zip(model.parameters(), reference.parameters(), strict=True):
            got.data = want.detach().clone()
    for step in range(2, 4):
        _step(compiled, optimizer, _batch(step), seed=step)
        _step(reference, eager_optimizer, _batch(step), seed=step)
        _assert_same(model, reference)
    assert backward.counters.recapture_reasons["parameter_moved"] == 1


def _keeping_held_outputs() -> CompilerConfig:
    config = CompilerConfig()
    config.debug.aclgraph.keep_held_outputs = True
    return config


def test_keeping_held_outputs_never_overwrites_held_losses_and_gradients() -> None:
    model, reference = _pair()
    backend = get_npu_backend(compiler_config=_keeping_held_outputs())
    compiled = torch.compile(model, backend=backend)
    optimizer = OPTIMIZERS["adamw"](model.parameters())
    eager_optimizer = OPTIMIZERS["adamw"](reference.parameters())
    held: list[tuple[torch.Tensor, list[torch.Tensor], torch.Tensor, list[torch.Tensor]]] = []
    for step in range(5):
        batch = _batch(step)
        optimizer.zero_grad()
        eager_optimizer.zero_grad()
        loss, eager_loss = compiled(*batch), reference(*batch)
        loss.backward()
        eager_loss.backward()
        # Kept as they are: the loss (a forward output) and param.grad (backward outputs that
        # AccumulateGrad took over), i.e. graph memory the next steps must not write.
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        held.append((loss, grads, eager_loss, [p.grad.clone() for p in reference.parameters()]))
        optimizer.step()
        eager_optimizer.step()
    for loss, grads, eager_loss, eager_grads in held:
        torch.testing.assert_close(loss, eager_loss)
        for got, want in zip(grads, eager_grads, strict=True):
            torch.testing.assert_close(got, want)
    forward, backward = _runners(backend)
    assert forward.num_paths == backward.num_paths == 5  # each step's outputs are still held


def test_held_gradients_are_never_overwritten_and_a_held_loss_of_an_earlier_step_raises() -> None:
    model, reference = _pair()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    optimizer = OPTIMIZERS["adamw"](model.parameters())
    eager_optimizer = OPTIMIZERS["adamw"](reference.parameters())
    losses, held = [], []
    for step in range(5):
        batch = _batch(step)
        optimizer.zero_grad()
        eager_optimizer.zero_grad()
        loss, eager_loss = compiled(*batch), reference(*batch)
        loss.backward()
        eager_loss.backward()
        torch.testing.assert_close(loss, eager_loss)  # read within its step
        losses.append(loss)
        # Gradients are backward outputs: the backward's runner keeps whatever is held.
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        held.append((grads, [p.grad.clone() for p in reference.parameters()]))
        optimizer.step()
        eager_optimizer.step()
    for grads, eager_grads in held:
        for got, want in zip(grads, eager_grads, strict=True):
            torch.testing.assert_close(got, want)
    with pytest.raises(StaleOutputError):
        losses[0].item()  # the next step's forward overwrote it
    forward, backward = _runners(backend)
    assert (forward.num_paths, backward.num_paths) == (1, 5)


@pytest.mark.parametrize("keep", [False, True], ids=["default", "keep_held_outputs"])
def test_loss_alive_through_the_next_forward(keep: bool) -> None:
    model, reference = _pair()
    backend = get_npu_backend(compiler_config=_keeping_held_outputs() if keep else None)
    compiled = torch.compile(model, backend=backend)
    for step in range(5):
        model.zero_grad()
        reference.zero_grad()
        loss = compiled(*_batch(step))  # the previous step's loss is alive during this call
        loss.backward()
        eager_loss = reference(*_batch(step))
        eager_loss.backward()
        torch.testing.assert_close(loss, eager_loss)
        _assert_same(model, reference)
    forward, backward = _runners(backend)
    # By default each step's forward takes the previous loss back; kept, it alternates paths.
    assert (forward.num_paths, backward.num_paths) == ((2, 1) if keep else (1, 1))
    assert forward.counters.captures == (2 if keep else 1)


def test_gradients_kept_by_zero_grad_without_set_to_none_accumulate_right() -> None:
    model, reference = _pair()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    for step in range(4):
        model.zero_grad(set_to_none=False)
        reference.zero_grad(set_to_none=False)
        compiled(*_batch(step)).backward()
        reference(*_batch(step)).backward()
        _assert_same(model, reference)
    # The first backward's gradients became param.grad for good: later ones take a second path.
    _, backward = _runners(backend)
    assert backward.num_paths == 2


def test_second_backward_with_retain_graph_and_accumulated_microbatches() -> None:
    model, reference = _pair()
    compiled = torch.compile(model, backend=get_npu_backend())
    for step in range(3):
        model.zero_grad()
        reference.zero_grad()
        for run in (compiled, reference):
            loss = run(*_batch(step))
            loss.backward(retain_graph=True)
            loss.backward()
            # Two micro-batches before one backward: two forwards' saved tensors alive at once.
            (run(*_batch(step + 10)) + run(*_batch(step + 20))).backward()
        _assert_same(model, reference)


def test_input_gradients_and_dynamic_batch_sizes() -> None:
    model, reference = _pair()
    model.eval()  # BatchNorm from its running statistics: rows independent
    reference.eval()
    compiled = torch.compile(model, backend=get_npu_backend(), dynamic=True)
    for step, rows in enumerate([3, 5, 7, 3, 5]):
        x, y = _batch(step, rows)
        x.requires_grad_(True)
        (got,) = torch.autograd.grad(compiled(x, y), [x])
        (want,) = torch.autograd.grad(reference(x, y), [x])
        torch.testing.assert_close(got, want)


def test_switching_train_eval_and_no_grad_stays_equal_to_eager() -> None:
    model, reference = _pair(dropout=0.25)
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    optimizer = OPTIMIZERS["sgd-momentum"](model.parameters())
    eager_optimizer = OPTIMIZERS["sgd-momentum"](reference.parameters())
    for step in range(3):
        batch = _batch(step)
        for module in (model, reference):
            module.train()
        assert _step(compiled, optimizer, batch, seed=step) == pytest.approx(
            _step(reference, eager_optimizer, batch, seed=step)
        )
        for module in (model, reference):
            module.eval()
        with torch.no_grad():
            torch.testing.assert_close(compiled(*batch), reference(*batch))
        # Eval mode with grad on: a training graph again (no dropout, running statistics).
        got, want = compiled(*batch), reference(*batch)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want)
        _assert_same(model, reference)
    assert backend.stats.fallbacks == []
    names = [runner.name for runner in backend.stats.runners]
    assert len([n for n in names if n.endswith("_backward")]) == 2  # train and eval graphs


def test_backward_copies_autograd_tensors_even_without_clone_input() -> None:
    # The gradient of `bias` is the incoming gradient itself. Were that captured in place (as
    # clone_input=False does for user inputs), the next backward would copy its gradient into
    # the tensor the first one returned, which the caller still holds.
    class AddBias(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bias = torch.nn.Parameter(torch.zeros(3, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.bias

    config = CompilerConfig()
    config.debug.aclgraph.clone_input = False
    model, reference = AddBias(), AddBias()
    compiled = torch.compile(model, backend=get_npu_backend(compiler_config=config))
    held = []
    for step in range(3):
        weight = torch.full((3, 4), float(step + 1))
        (got,) = torch.autograd.grad((compiled(torch.ones(3, 4)) * weight).sum(), [model.bias])
        (want,) = torch.autograd.grad(
            (reference(torch.ones(3, 4)) * weight).sum(), [reference.bias]
        )
        held.append((got, want))
    for got, want in held:
        torch.testing.assert_close(got, want)


def test_double_backward_raises_torchs_error_after_right_first_order_gradients() -> None:
    # AOT autograd's limit, for every backend built on it: first-order gradients are right,
    # differentiating them again raises.
    model, reference = _pair()
    compiled = torch.compile(model, backend=get_npu_backend())
    batch = _batch(0)
    grads = torch.autograd.grad(compiled(*batch), list(model.parameters()), create_graph=True)
    eager = torch.autograd.grad(reference(*batch), list(reference.parameters()), create_graph=True)
    for got, want in zip(grads, eager, strict=True):
        torch.testing.assert_close(got, want)
    with pytest.raises(RuntimeError, match="double backward"):
        sum(g.pow(2).sum() for g in grads).backward()


def test_backward_graph_that_cannot_be_captured_runs_eagerly_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from npu_compile import _training

    # The check itself is the forward's (tested there); here: what happens to the backward.
    monkeypatch.setattr(_training, "host_sync_reason", lambda gm: "test says it reads on host")
    model, reference = _pair()
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    with caplog.at_level(logging.WARNING, logger="npu_compile"):
        for step in range(2):
            model.zero_grad()
            reference.zero_grad()
            compiled(*_batch(step)).backward()
            reference(*_batch(step)).backward()
            _assert_same(model, reference)
    (forward,) = backend.stats.runners
    assert forward.counters.replays == 1
    backward_name = f"{forward.name}_backward"
    assert backend.stats.fallback_reasons == {backward_name: FallbackReason.HOST_SYNC}
    (record,) = [r for r in caplog.records if r.name == "npu_compile"]
    assert f"{backward_name} runs eagerly (host_sync): test says" in record.getMessage()


def _hugging_face_model(name: str) -> torch.nn.Module:
    """A tiny causal LM or sequence classifier from a config (nothing downloaded)."""
    transformers = pytest.importorskip("transformers")
    common: dict[str, Any] = {
        "vocab_size": 96,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
    }
    if name == "llama":
        config = transformers.LlamaConfig(num_key_value_heads=2, **common)
        return transformers.LlamaForCausalLM(config)  # type: ignore[no-any-return]
    config = transformers.BertConfig(num_labels=3, **common)
    return transformers.BertForSequenceClassification(config)  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "bert"])
def test_hugging_face_training_steps_equal_eager(name: str) -> None:
    torch.manual_seed(0)
    model = _hugging_face_model(name).train()  # BERT's dropout is on
    reference = copy.deepcopy(model)
    backend = get_npu_backend()
    compiled = torch.compile(model, backend=backend)
    optimizer = OPTIMIZERS["adamw"](model.parameters())
    eager_optimizer = OPTIMIZERS["adamw"](reference.parameters())
    generator = torch.Generator().manual_seed(1)
    for step in range(5):
        ids = torch.randint(1, 96, (2, 8), generator=generator)
        labels = ids if name == "llama" else torch.randint(0, 3, (2,), generator=generator)
        losses = []
        for run, opt in ((compiled, optimizer), (reference, eager_optimizer)):
            opt.zero_grad()
            torch.manual_seed(step)
            loss = run(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1])
        for (param, got), want in zip(
            model.named_parameters(), reference.parameters(), strict=True
        ):
            torch.testing.assert_close(got, want, msg=param)
    assert backend.stats.fallbacks == []
    backward = [r for r in backend.stats.runners if r.name.endswith("_backward")]
    assert backward
    assert sum(r.counters.captures for r in backward) >= 1
    assert sum(r.counters.replays for r in backward) >= 3
    # The same model for inference, in the same process.
    model.eval()
    reference.eval()
    with torch.no_grad():
        got = compiled(input_ids=ids).logits
        torch.testing.assert_close(got, reference(input_ids=ids).logits)
