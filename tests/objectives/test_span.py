"""T5 span corruption (Raffel et al. 2020, section 3.3.4): counts exact per length, the random
segmentation checked against its distribution, sentinels reserved and in order, the target
closed by a sentinel, and the original rebuilt from input and target."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import tfamily
from tfamily import members
from tfamily.objectives import SpanCorruption
from tfamily.objectives.span import corrupt, noise_mask, random_segmentation, restore, span_counts
from tfamily.train import fit
from tfamily.train.config import load

V = 20
SMALL = dict(d_model=32, dropout=0.0, vocab_size=V, depth__n_layers=1, heads__n_heads=4, ff__d_ff=64)


@pytest.mark.parametrize("length, noise, spans", [
    (2, 1, 1), (3, 1, 1), (10, 2, 1), (20, 3, 1), (30, 4, 1), (70, 10, 3), (100, 15, 5), (190, 29, 10),
    (256, 38, 13), (512, 77, 26)])
def test_counts_are_fixed_per_length(length, noise, spans):
    # By hand: round(0.15 L) half to even (30 -> 4.5 -> 4, 70 -> 10.5 -> 10), as T5 in float32
    # (190 -> 28.5 in float64 but 28.500002 in float32 -> 29), clamped to 1..L-1;
    # spans = max(round(noise / 3), 1).
    assert span_counts(length) == (noise, spans)


@pytest.mark.parametrize("length", [2, 3, 7, 16, 33, 64, 100, 257])
def test_every_row_has_exactly_the_counts(length):
    noise, spans = span_counts(length)
    mask = noise_mask(300, length, generator=torch.Generator().manual_seed(length))
    starts = mask & ~F.pad(mask[:, :-1], (1, 0), value=False)
    assert (mask.sum(-1) == noise).all() and (starts.sum(-1) == spans).all()
    assert not mask[:, 0].any() and mask[:, -1].all()  # kept piece first, noise piece last


def _pmf_first_piece(n: int, s: int, j: int) -> float:
    """P(first of s pieces of a uniform composition of n has length j) = C(n-j-1, s-2) / C(n-1, s-1)."""
    return math.comb(n - j - 1, s - 2) / math.comb(n - 1, s - 1)


@pytest.mark.parametrize("n, s", [(38, 13), (10, 3), (77, 26)])
def test_segmentation_is_a_uniform_composition(n, s):
    rows = 20000
    lengths = random_segmentation(rows, n, s, torch.Generator().manual_seed(n))
    assert (lengths >= 1).all() and (lengths.sum(-1) == n).all()
    # Mean span length: n / s for every piece, within 5 standard errors.
    sd = lengths.float().std(0)
    assert ((lengths.float().mean(0) - n / s).abs() <= 5 * sd / math.sqrt(rows)).all()
    # The first piece's length follows the exact marginal of a uniform composition.
    counts = torch.bincount(lengths[:, 0], minlength=n + 1)
    for j in range(1, 8):
        p = _pmf_first_piece(n, s, j)
        assert abs(int(counts[j]) - rows * p) <= 5 * math.sqrt(rows * p * (1 - p)), (j, int(counts[j]), rows * p)


def test_noise_density_and_mean_span_over_many_lengths():
    gen = torch.Generator().manual_seed(0)
    noise_total = spans_total = tokens = 0
    for length in range(20, 600, 7):
        mask = noise_mask(4, length, generator=gen)
        starts = mask & ~F.pad(mask[:, :-1], (1, 0), value=False)
        noise_total += int(mask.sum())
        spans_total += int(starts.sum())
        tokens += mask.numel()
    assert noise_total / tokens == pytest.approx(0.15, abs=0.005)
    assert noise_total / spans_total == pytest.approx(3.0, abs=0.1)


@pytest.mark.parametrize("seed, length", [(0, 12), (1, 50), (2, 129), (3, 256)])
def test_sentinels_in_order_and_round_trip(seed, length):
    obj = SpanCorruption(V, n_sentinels=60)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (40, length), generator=gen)
    inputs, targets = obj.corrupt(x, gen)
    noise, spans = span_counts(length)
    assert inputs.shape == (40, length - noise + spans) and targets.shape == (40, noise + spans + 1)
    sentinels = obj.sentinels.tolist()
    # T5 counts down from the vocabulary's end: sentinel 0 is the last embedding row.
    assert sentinels[0] == V + 60 and sentinels == list(range(V + 60, V, -1))
    for i in range(40):
        inp, tgt = inputs[i].tolist(), targets[i].tolist()
        assert [t for t in inp if t >= V] == sentinels[:spans]
        assert [t for t in tgt if t >= V] == sentinels[:spans + 1] and tgt[0] == sentinels[0]
        assert tgt[-1] == sentinels[spans]  # closed by a sentinel, not EOS
        assert restore(inp, tgt, sentinels) == x[i].tolist()


def test_corrupt_by_hand():
    x = torch.tensor([[10, 11, 12, 13, 14, 15, 16]])
    noise = torch.tensor([[False, True, True, False, False, True, True]])
    inputs, targets = corrupt(x, noise, torch.tensor([99, 98, 97]))
    assert inputs.tolist() == [[10, 99, 13, 14, 98]]
    assert targets.tolist() == [[99, 11, 12, 98, 15, 16, 97]]


def test_reserved_ids_and_embedding_rows():
    model = tfamily.build(members.vanilla(**SMALL, objective={"name": "span_corruption",
                                                               "params": {"n_sentinels": 10}}))
    assert model.embed.weight.shape[0] == V + 1 + 10
    assert model.objective.start_id == V and int(model.objective.sentinels.min()) == V + 1


class _Recorder(torch.nn.Module):
    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.seen = vocab, None

    def forward(self, src, tgt):
        self.seen = (src, tgt)
        return torch.randn(*tgt.shape, self.vocab, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("seed, length", [(0, 10), (1, 40), (2, 97)])
def test_loss_is_teacher_forced_cross_entropy_on_the_target(seed, length):
    obj, model = SpanCorruption(V, n_sentinels=40), _Recorder(V + 41)
    x = torch.randint(0, V, (3, length))
    torch.manual_seed(seed)
    loss, m = obj(model, {"x": x})
    torch.manual_seed(seed)
    inputs, targets = obj.corrupt(x)
    src, tgt = model.seen
    assert torch.equal(src, inputs) and (tgt[:, 0] == V).all() and torch.equal(tgt[:, 1:], targets[:, :-1])
    logits = model(inputs, tgt)
    torch.testing.assert_close(loss, F.cross_entropy(logits.flatten(0, 1), targets.flatten()))
    assert m["tokens"] == targets.numel()


def test_bad_input_is_refused_with_the_fix():
    obj = SpanCorruption(V, n_sentinels=3)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        span_counts(1)
    with pytest.raises(ValueError, match="raise objective.params.n_sentinels"):
        obj.corrupt(torch.randint(0, V, (2, 100)))
    with pytest.raises(ValueError, match=r"reserved .* got 0\.\.20"):
        obj.corrupt(torch.tensor([[0, 20, 3]]))
    with pytest.raises(ValueError, match="without padding"):
        obj(None, {"x": torch.zeros(1, 4, dtype=torch.long), "key_padding": torch.tensor([[True, True, True, False]])})
    for bad in (dict(noise_density=1.0), dict(mean_span=0.5), dict(n_sentinels=1)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SpanCorruption(V, **bad)


def test_evaluation_is_deterministic():
    model = tfamily.build(members.vanilla(**SMALL, objective={"name": "span_corruption"})).eval()
    x = torch.randint(0, V, (4, 40))
    assert model.loss({"x": x})[0].item() == model.loss({"x": x})[0].item()


def test_pretrains_the_encoder_decoder_on_a_corpus_through_the_loop(tmp_path):
    cfg = load(None, {"member": "vanilla", "model.d_model": 32, "model.heads.n_heads": 2,
                      "model.depth.n_layers": 1, "model.ff.d_ff": 64, "model.dropout": 0.0,
                      "model.objective.name": "span_corruption", "data.seq_len": 40, "train.batch_size": 4,
                      "train.max_steps": 3, "train.eval_every": None, "train.eval_tokens": 200,
                      "train.ckpt_every": None, "train.warmup": 1, "train.precision": "fp32",
                      "train.progress": False, "train.tensorboard": False, "train.out": str(tmp_path / "run")})
    r = fit.train(cfg)
    assert r["steps"] == 3 and math.isfinite(r["val_loss"])
