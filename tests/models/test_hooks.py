"""Auxiliary losses and after-step hooks reach the loss for every model kind: an
encoder-decoder with an adaptive-span decoder reports and trains its span penalty,
a part in the encoder is collected too, and eval mode leaves the objective alone."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tfamily
from tfamily import members
from tfamily.models.hooks import AfterStep, AuxLoss, aux_losses, run_after_step

V = 19
SMALL = dict(d_model=32, dropout=0.0, vocab_size=V, depth__n_layers=2, heads__n_heads=4, ff__d_ff=64)
SPAN = dict(name="adaptive_span", params=dict(max_span=16, ramp=4, init=0.5, l1=0.1))


def _batch(g, b=4, n=9):
    src = torch.randint(0, V, (b, n), generator=g)
    return {"src": src, "tgt_in": src, "tgt_out": src.flip(1)}


def _encdec_with_spans():
    return tfamily.build(members.vanilla(**SMALL, pattern=SPAN))


def _spans(model):
    return torch.stack([b.attn.pattern.span_frac.detach().clone() for b in model.decoder.blocks])


def test_encoder_decoder_reports_each_layers_span_penalty_in_training_only():
    torch.manual_seed(0)
    model = _encdec_with_spans()
    batch = _batch(torch.Generator().manual_seed(0))
    loss, metrics = model.loss(batch)
    names = {f"aux/decoder.blocks.{i}.attn.pattern" for i in range(2)}
    assert names <= set(metrics)
    # 0.1 (l1) * 0.5 (init fraction) * 16 (max_span): lambda times the mean span.
    for name in names:
        assert metrics[name] == pytest.approx(0.1 * 0.5 * 16)
    plain, _ = model.objective(model, batch)
    torch.testing.assert_close(loss, plain + sum(aux_losses(model).values()))
    model.eval()
    loss_eval, metrics_eval = model.loss(batch)
    assert not any(k.startswith("aux/") for k in metrics_eval)
    torch.testing.assert_close(loss_eval, plain)


def test_encoder_decoder_span_penalty_gradient_reaches_the_spans_and_training_shrinks_them():
    torch.manual_seed(0)
    model = _encdec_with_spans()
    g = torch.Generator().manual_seed(1)
    loss, _ = model.loss(_batch(g))
    penalty = sum(aux_losses(model).values())
    grads = torch.autograd.grad(penalty, [b.attn.pattern.span_frac for b in model.decoder.blocks])
    for grad in grads:  # d(l1 * S * mean(frac)) / d frac_h = l1 * S / n_heads
        torch.testing.assert_close(grad, torch.full_like(grad, 0.1 * 16 / 4))
    before = _spans(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(5):
        loss, _ = model.loss(_batch(g))
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.after_step()
    after = _spans(model)
    assert (after < before).all(), (before, after)  # the penalty outweighs the task here
    assert ((after >= 0) & (after <= 1)).all()


def test_after_step_clamps_spans_in_an_encoder_decoder():
    model = _encdec_with_spans()
    with torch.no_grad():
        model.decoder.blocks[0].attn.pattern.span_frac.fill_(1.7)
        model.decoder.blocks[1].attn.pattern.span_frac.fill_(-0.3)
    model.after_step()
    torch.testing.assert_close(_spans(model), torch.tensor([[1.0] * 4, [0.0] * 4]))


class _Probe(nn.Module):
    """A part declaring both hooks, for placing anywhere in a model."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(2.0))
        self.steps = 0

    def aux_loss(self) -> torch.Tensor:
        return 3.0 * self.w

    def after_step(self) -> None:
        self.steps += 1


@pytest.mark.parametrize("name, where", [("vanilla", "encoder.blocks.1"), ("vanilla", "decoder.blocks.0"),
                                         ("gpt", "stack.blocks.0"), ("bert", "stack.blocks.1")])
def test_every_model_kind_collects_a_part_anywhere(name, where):
    torch.manual_seed(0)
    model = tfamily.build(members.get(name)(**SMALL))
    probe = _Probe()
    assert isinstance(probe, AuxLoss) and isinstance(probe, AfterStep)
    model.get_submodule(where).add_module("probe", probe)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, V, (2, 8), generator=g)
    batch = ({"src": x, "tgt_in": x, "tgt_out": x} if name == "vanilla" else {"x": x, "y": x})
    loss, metrics = model.loss(batch)
    assert metrics[f"aux/{where}.probe"] == 6.0
    loss.backward()
    assert probe.w.grad.item() == 3.0
    model.after_step()
    run_after_step(model)
    assert probe.steps == 2


def test_plain_modules_are_not_hooks():
    assert not isinstance(nn.Linear(2, 2), AuxLoss)
    assert not isinstance(nn.Linear(2, 2), AfterStep)


def test_universal_transformer_with_act_translates_with_its_ponder_cost():
    """The issue's case: a UT with ACT used as an encoder-decoder trains its ponder loss."""
    torch.manual_seed(0)
    model = tfamily.build(members.universal_transformer(**SMALL, depth__name="universal_act"))
    loss, metrics = model.loss(_batch(torch.Generator().manual_seed(0)))
    ponder = {k: v for k, v in metrics.items() if k.startswith("aux/")}
    assert any(k.startswith("aux/encoder") for k in ponder) and any(k.startswith("aux/decoder") for k in ponder)
    assert all(v > 0 for v in ponder.values())
    plain, _ = model.objective(model, _batch(torch.Generator().manual_seed(0)))
    torch.testing.assert_close(loss, plain + sum(aux_losses(model).values()))
    loss.backward()
    halting = [p for n, p in model.named_parameters() if "halt" in n]
    assert halting and all(p.grad is not None and p.grad.abs().sum() > 0 for p in halting)
