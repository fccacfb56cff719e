"""Language-model objectives: the masked token loss, the batch checks, the registry,
and objectives that do not fit their model (BERT's recipe: test_mlm.py)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tfamily
from tfamily import members
from tfamily.objectives import OBJECTIVES, CausalLM, MaskedLM, Seq2Seq, SpanCorruption, token_loss

V = 17
SMALL = dict(d_model=32, dropout=0.0, vocab_size=V, depth__n_layers=1, heads__n_heads=4, ff__d_ff=64)


def test_token_loss_averages_over_kept_positions_only():
    logits, target = torch.randn(2, 5, V), torch.randint(0, V, (2, 5))
    keep = torch.zeros(2, 5, dtype=torch.bool)
    keep[0, 1], keep[1, 3] = True, True
    loss, m = token_loss(logits, target, keep)
    expect = (F.cross_entropy(logits[0, 1], target[0, 1]) + F.cross_entropy(logits[1, 3], target[1, 3])) / 2
    torch.testing.assert_close(loss, expect)
    assert m["tokens"] == 2
    full, m = token_loss(logits, target)
    torch.testing.assert_close(full, F.cross_entropy(logits.flatten(0, 1), target.flatten()))
    assert m["tokens"] == 10


def test_token_loss_accuracy():
    target = torch.tensor([[1, 2, 3]])
    logits = F.one_hot(torch.tensor([[1, 2, 0]]), V).float()
    _, m = token_loss(logits, target)
    assert m["acc"] == pytest.approx(2 / 3)
    _, m = token_loss(logits, target, torch.tensor([[True, True, False]]))
    assert m["acc"] == 1.0


def test_causal_lm_and_seq2seq_equal_manual_cross_entropy():
    gpt = tfamily.build(members.gpt(**SMALL)).eval()
    x, y = torch.randint(0, V, (2, 6)), torch.randint(0, V, (2, 6))
    loss, _ = gpt.loss({"x": x, "y": y})
    torch.testing.assert_close(loss, F.cross_entropy(gpt(x).flatten(0, 1), y.flatten()))
    van = tfamily.build(members.vanilla(**SMALL)).eval()
    src, tin, tout = torch.randint(0, V, (2, 5)), torch.randint(0, V, (2, 4)), torch.randint(0, V, (2, 4))
    loss, _ = van.loss({"src": src, "tgt_in": tin, "tgt_out": tout})
    torch.testing.assert_close(loss, F.cross_entropy(van(src, tin).flatten(0, 1), tout.flatten()))


@pytest.mark.parametrize("objective, batch, missing", [
    (CausalLM(), {"x": 0}, "'y'"),
    (Seq2Seq(), {"src": 0, "tgt_in": 0}, "'tgt_out'"),
])
def test_missing_batch_keys_are_named(objective, batch, missing):
    with pytest.raises(ValueError, match=missing):
        objective(None, batch)


@pytest.mark.parametrize("member, objective", [("gpt", "masked_lm"), ("bert", "seq2seq"),
                                               ("vanilla", "causal_lm")])
def test_objective_not_fitting_the_model_is_refused(member, objective):
    with pytest.raises(ValueError, match=rf"objective '{objective}' does not fit model"):
        members.get(member)(objective={"name": objective})


def test_registry_builds_each_objective():
    assert set(OBJECTIVES) >= {"causal_lm", "masked_lm", "seq2seq", "span_corruption", "al_rfou"}
    assert isinstance(tfamily.build(members.bert(**SMALL)).objective, MaskedLM)
    span = tfamily.build(members.vanilla(**SMALL, objective={"name": "span_corruption"}))
    assert isinstance(span.objective, SpanCorruption)
