"""BERT's masked LM checked against its definition (Devlin et al. 2019, section 3.1, appendix
A.1): exactly max(1, round(0.15 n)) of each row's candidates selected, never padding or a
special id; 80/10/10 within binomial tolerances; the loss over exactly the selected positions."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import tfamily
from tfamily import members
from tfamily.objectives import MaskedLM
from tfamily.objectives.mlm import select, selection_count
from tfamily.train import fit
from tfamily.train.config import load

V = 17
SMALL = dict(d_model=32, dropout=0.0, vocab_size=V, depth__n_layers=1, heads__n_heads=4, ff__d_ff=64)


def _within(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    """``count`` successes in ``n`` trials is within ``sigmas`` binomial standard deviations of ``p``."""
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recipe_proportions_never_padding_or_special(seed):
    special = [0, 5]
    mlm = MaskedLM(V, special_ids=special)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (1500, 64), generator=gen)
    lengths = torch.randint(1, 65, (1500,), generator=gen)
    real = torch.arange(64) < lengths[:, None]
    out, picked = mlm.corrupt(x, real, generator=gen)
    is_special = (x == 0) | (x == 5)
    assert not (picked & ~real).any() and not (picked & is_special).any()
    candidates = real & ~is_special
    n_cand = candidates.sum(-1)
    expect = [0 if n == 0 else min(n, max(1, round(0.15 * n))) for n in n_cand.tolist()]
    assert picked.sum(-1).tolist() == expect  # exact per row, as BERT's create_pretraining_data.py
    assert torch.equal(out[~picked], x[~picked])
    n = int(picked.sum())
    draws = V - len(special)  # random replacements come from the non-special data ids
    masked = int(((out == mlm.mask_id) & picked).sum())
    same = int(((out == x) & picked).sum())
    other = int(((out != x) & (out != mlm.mask_id) & picked).sum())
    assert masked + same + other == n
    assert _within(masked, n, 0.8)
    assert _within(same, n, 0.1 + 0.1 / draws)           # kept, or a random draw of the original
    assert _within(other, n, 0.1 * (1 - 1 / draws))
    replaced = out[(out != x) & (out != mlm.mask_id) & picked]
    assert not ((replaced == 0) | (replaced == 5) | (replaced >= V)).any()


def test_selection_is_uniform_over_candidate_positions():
    candidates = torch.ones(4000, 40, dtype=torch.bool)
    candidates[:, ::7] = False
    picked = select(candidates, 0.15, torch.Generator().manual_seed(3))
    per_col = picked.sum(0)
    assert not per_col[::7].any()
    n_cand = int(candidates[0].sum())
    p = selection_count(torch.tensor([n_cand]), 0.15).item() / n_cand
    assert all(_within(int(c), 4000, p) for i, c in enumerate(per_col.tolist()) if i % 7)


def test_selection_count_rounds_and_keeps_at_least_one():
    n = torch.tensor([0, 1, 3, 10, 30, 100, 512])
    assert selection_count(n, 0.15).tolist() == [0, 1, 1, 2, 4, 15, 77]   # round(4.5) = 4 (half to even)


class _Recorder(torch.nn.Module):
    """A model that remembers its input and returns fixed random logits."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.seen = vocab, None

    def forward(self, tokens, key_padding=None):
        self.seen = tokens
        return torch.randn(*tokens.shape, self.vocab, generator=torch.Generator().manual_seed(7))


@pytest.mark.parametrize("seed, n", [(0, 12), (1, 33), (2, 64)])
def test_loss_is_cross_entropy_over_exactly_the_selected_positions(seed, n):
    mlm, model = MaskedLM(V), _Recorder(V + 1)
    x = torch.randint(0, V, (5, n))
    torch.manual_seed(seed)
    loss, m = mlm(model, {"x": x})
    torch.manual_seed(seed)
    corrupted, picked = mlm.corrupt(x)
    assert torch.equal(model.seen, corrupted)
    logits = model(corrupted)
    expect = F.cross_entropy(logits[picked], x[picked])
    torch.testing.assert_close(loss, expect)
    assert m["tokens"] == int(picked.sum()) == 5 * round(0.15 * n)


def test_evaluation_masks_are_fixed_training_masks_are_fresh():
    model = tfamily.build(members.bert(**SMALL))
    x = torch.randint(0, V, (4, 30))
    train = [model.loss({"x": x})[0].item() for _ in range(2)]
    model.eval()
    evals = [model.loss({"x": x})[0].item() for _ in range(2)]
    assert evals[0] == evals[1] and train[0] != train[1]


def test_mask_has_its_own_id_and_embedding_row():
    mlm = MaskedLM(V)
    assert mlm.mask_id == V and mlm.extra_tokens == 1
    model = tfamily.build(members.bert(**SMALL))
    assert model.embed.weight.shape[0] == V + 1
    explicit = tfamily.build(members.bert(**SMALL, objective__params={"mask_id": 3}))
    assert explicit.embed.weight.shape[0] == V and explicit.objective.mask_id == 3
    x = torch.full((50, 40), 3)
    x[:, ::2] = 4
    _, picked = explicit.objective.corrupt(x)
    assert not picked[x == 3].any()  # an explicit [MASK] id is special: never a target


def test_parameter_checks_name_the_value():
    with pytest.raises(ValueError, match="mask_id=17"):
        MaskedLM(V, mask_id=V)
    with pytest.raises(ValueError, match="got 1.5"):
        MaskedLM(V, mask_prob=1.5)
    with pytest.raises(ValueError, match=r"special_ids .*got \[17\]"):
        MaskedLM(V, special_ids=[17])
    with pytest.raises(ValueError, match="leave no data id"):
        MaskedLM(3, special_ids=[0, 1, 2])
    with pytest.raises(ValueError, match="mask_id=-1"):
        tfamily.build(members.bert(**SMALL, objective__params={"mask_id": -1}))
    with pytest.raises(ValueError, match="key_padding has shape"):
        MaskedLM(V).corrupt(torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="'x'"):
        MaskedLM(V)(None, {"y": 0})


def test_trains_on_a_corpus_through_the_loop(tmp_path):
    cfg = load(None, {"member": "bert", "model.d_model": 32, "model.heads.n_heads": 2, "model.depth.n_layers": 1,
                      "model.dropout": 0.0, "data.seq_len": 32, "train.batch_size": 4, "train.max_steps": 3,
                      "train.eval_every": None, "train.eval_tokens": 256, "train.ckpt_every": None,
                      "train.warmup": 1, "train.precision": "fp32", "train.progress": False,
                      "train.tensorboard": False, "train.out": str(tmp_path / "run")})
    r = fit.train(cfg)
    assert r["steps"] == 3 and math.isfinite(r["val_loss"])
    # 15% of the scored windows' characters are predicted: round(0.15 * 32) = 5 per window.
    assert r["val_loss"] > 0.5 * math.log(65)
