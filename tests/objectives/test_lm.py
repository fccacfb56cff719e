"""Language-model objectives: the masked token loss, BERT's 80/10/10 corruption
recipe, the batch checks, and objectives that do not fit their model."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import tfamily
from tfamily import members
from tfamily.objectives import OBJECTIVES, CausalLM, MaskedLM, Seq2Seq, token_loss

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


def test_masked_lm_recipe_proportions_and_padding():
    mlm = MaskedLM(V, mask_prob=0.15)
    x = torch.randint(0, V - 1, (200, 100))
    pad = torch.ones_like(x, dtype=torch.bool)
    pad[:, 80:] = False
    out, picked = mlm.corrupt(x, pad, generator=torch.Generator().manual_seed(0))
    assert not picked[:, 80:].any()  # padding is never a target
    assert torch.equal(out[~picked], x[~picked])  # unpicked tokens are untouched
    n = picked.sum().item()
    assert n / pad.sum().item() == pytest.approx(0.15, abs=0.01)
    masked = (out == mlm.mask_id) & picked
    assert masked.sum().item() / n == pytest.approx(0.8, abs=0.02)
    same = (out == x) & picked
    # 10% kept, plus the random replacements that happen to draw the original.
    assert same.sum().item() / n == pytest.approx(0.1 + 0.1 / V, abs=0.02)


def test_masked_lm_loss_is_on_picked_positions():
    model = tfamily.build(members.bert(**SMALL))
    torch.manual_seed(1)
    loss, m = model.loss({"x": torch.randint(0, V - 1, (4, 30))})
    assert torch.isfinite(loss) and 0 < m["tokens"] < 120
    assert loss.item() > 0.5 * math.log(V)


def test_mask_has_its_own_id_and_embedding_row():
    mlm = MaskedLM(V)
    assert mlm.mask_id == V and mlm.extra_tokens == 1
    x = torch.randint(0, V, (50, 40))
    out, picked = mlm.corrupt(x, generator=torch.Generator().manual_seed(0))
    assert (out == V).any() and not (out[~picked] == V).any()   # only picked tokens are masked
    model = tfamily.build(members.bert(**SMALL))
    assert model.embed.weight.shape[0] == V + 1
    loss, _ = model.loss({"x": x[:4]})   # every data id, plus [MASK], embeds
    assert torch.isfinite(loss)
    explicit = tfamily.build(members.bert(**SMALL, objective__params={"mask_id": 3}))
    assert explicit.embed.weight.shape[0] == V and explicit.objective.mask_id == 3


def test_masked_lm_parameter_checks():
    with pytest.raises(ValueError, match="mask_id=17"):
        MaskedLM(V, mask_id=V)
    with pytest.raises(ValueError, match="got 1.5"):
        MaskedLM(V, mask_prob=1.5)
    with pytest.raises(ValueError, match="mask_id=-1"):
        tfamily.build(members.bert(**SMALL, objective__params={"mask_id": -1}))


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
    (MaskedLM(V), {"y": 0}, "'x'"),
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
    spec = members.bert(**SMALL)
    assert set(OBJECTIVES) >= {"causal_lm", "masked_lm", "seq2seq"}
    assert isinstance(OBJECTIVES["masked_lm"](spec), MaskedLM)
