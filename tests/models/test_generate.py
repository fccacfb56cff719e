"""Decoding: sampling filters (temperature, top-k, nucleus) against hand-built
distributions, cached generation against uncached, greedy and beam search for the
encoder-decoder scored by teacher forcing, and the sampling-parameter checks."""
from __future__ import annotations

import itertools

import pytest
import torch

import tfamily
from tfamily import members
from tfamily.models.generate import beam_search, generate, greedy_decode, pick_next

V = 12
SMALL = dict(d_model=32, dropout=0.0, vocab_size=V, depth__n_layers=2, heads__n_heads=4, ff__d_ff=64)
BOS, EOS = 0, 1


@pytest.fixture(scope="module")
def gpt():
    torch.manual_seed(0)
    return tfamily.build(members.gpt(**SMALL, heads__n_kv_heads=2, position__max_len=64)).eval()


@pytest.fixture(scope="module")
def vanilla():
    """Untied head, sharpened, with eos made likely, so hypotheses differ and end early."""
    torch.manual_seed(0)
    model = tfamily.build(members.vanilla(**SMALL, tie_embeddings=False)).eval()
    with torch.no_grad():
        # Set, not scaled from the default init (which starts near uniform on purpose).
        torch.nn.init.normal_(model.head.proj.weight, std=0.4)
        model.head.proj.weight[EOS].mul_(2.5)
    return model


def _logits(probs, order):
    """Logits over V tokens: ``probs`` placed at the token ids in ``order``, the rest tiny."""
    p = torch.full((V,), 1e-9)
    p[torch.tensor(order)] = torch.tensor(probs)
    return p.log()


def _samples(logits, n=20000, seed=0, **kw):
    return pick_next(logits.expand(n, V), generator=torch.Generator().manual_seed(seed), **kw)


PROBS, ORDER = [0.5, 0.3, 0.15, 0.05], [7, 2, 9, 4]  # token 7 is the most likely, then 2, 9, 4


@pytest.mark.parametrize("kw, allowed", [
    (dict(top_k=1), {7}),
    (dict(top_k=3), {7, 2, 9}),
    (dict(top_p=0.7), {7, 2}),            # mass before token 9 is 0.8 >= 0.7
    (dict(top_p=0.85), {7, 2, 9}),        # mass before token 4 is 0.95 >= 0.85
    (dict(top_p=1e-6), {7}),              # the top token always stays
    (dict(top_k=2, top_p=0.99), {7, 2}),
    (dict(temperature=3.0, top_k=2), {7, 2}),
    (dict(temperature=0.5, top_p=0.7), {7, 2}),
])
def test_filters_never_pick_outside_the_allowed_set(kw, allowed):
    got = set(_samples(_logits(PROBS, ORDER), **kw).tolist())
    assert got == allowed  # nothing outside, and every allowed token does occur


def test_sampling_frequencies_follow_the_renormalised_distribution():
    logits = _logits(PROBS, ORDER)
    s = _samples(logits, top_p=0.7)
    torch.testing.assert_close((s == 7).float().mean(), torch.tensor(0.5 / 0.8), atol=0.015, rtol=0)
    for t in (0.5, 2.0):
        s = _samples(logits, temperature=t)
        expect = (logits / t).softmax(-1)[7]
        torch.testing.assert_close((s == 7).float().mean(), expect, atol=0.015, rtol=0)


def test_seeded_generator_is_reproducible(gpt):
    prompt = torch.randint(0, V, (2, 3))
    run = lambda seed: generate(gpt, prompt, 12, temperature=1.5,  # noqa: E731
                                generator=torch.Generator().manual_seed(seed))
    assert torch.equal(run(5), run(5))
    assert not torch.equal(run(5), run(6))


def test_top_k_1_and_tiny_top_p_equal_greedy(gpt):
    prompt = torch.randint(0, V, (3, 4))
    greedy = generate(gpt, prompt, 10, greedy=True)
    assert greedy.shape == (3, 14) and torch.equal(greedy[:, :4], prompt)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(generate(gpt, prompt, 10, top_k=1, temperature=2.0, generator=g), greedy)
    assert torch.equal(generate(gpt, prompt, 10, top_p=1e-6, temperature=2.0, generator=g), greedy)


def test_cached_generation_equals_uncached(gpt):
    prompt = torch.randint(0, V, (2, 5))
    seen = []
    cached = generate(gpt, prompt, 15, greedy=True, on_token=seen.append)
    assert torch.equal(cached, generate(gpt, prompt, 15, greedy=True, use_cache=False))
    assert len(seen) == 15 and torch.equal(torch.cat(seen, 1), cached[:, 5:])
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(generate(gpt, prompt, 15, top_k=4, generator=g1),
                       generate(gpt, prompt, 15, top_k=4, generator=g2, use_cache=False))


def test_generate_restores_training_mode(gpt):
    gpt.train()
    generate(gpt, torch.zeros(1, 1, dtype=torch.long), 2)
    assert gpt.training
    gpt.eval()


@pytest.mark.parametrize("kw, match", [
    (dict(temperature=0.0), "temperature must be > 0, got 0.0"),
    (dict(temperature=-1.0), "temperature must be > 0, got -1.0"),
    (dict(top_k=0), "top_k must be an integer >= 1, got 0"),
    (dict(top_k=2.5), "top_k must be an integer >= 1, got 2.5"),
    (dict(top_p=0.0), r"top_p must be in \(0, 1\], got 0.0"),
    (dict(top_p=1.5), r"top_p must be in \(0, 1\], got 1.5"),
])
def test_bad_sampling_parameters_name_the_value(gpt, kw, match):
    with pytest.raises(ValueError, match=match):
        generate(gpt, torch.zeros(1, 2, dtype=torch.long), 3, **kw)


def test_bad_prompt_and_length(gpt):
    with pytest.raises(ValueError, match=r"\(3,\)"):
        generate(gpt, torch.zeros(3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="got -1"):
        generate(gpt, torch.zeros(1, 2, dtype=torch.long), -1)


def _teacher_forced_logprob(model, src, seqs):
    """Sum of log p(token) after bos, up to and including the first eos."""
    tgt_in, tgt_out = seqs[:, :-1], seqs[:, 1:]
    with torch.no_grad():
        lp = model(src, tgt_in).log_softmax(-1).gather(-1, tgt_out[..., None])[..., 0]
    is_eos = (tgt_out == EOS).long()
    live = (is_eos.cumsum(1) - is_eos) == 0
    return (lp * live).sum(1)


def test_greedy_decode_is_argmax_and_pads_with_eos(vanilla):
    src = torch.randint(2, V, (6, 5))
    out = greedy_decode(vanilla, src, bos=BOS, eos=EOS, max_len=8)
    assert (out[:, 0] == BOS).all()
    assert (out == EOS).any(), "fixture should make some rows finish"
    with torch.no_grad():
        argmax = vanilla(src, out[:, :-1]).argmax(-1)
    for row, pred in zip(out, argmax):
        ends = (row[1:] == EOS).nonzero()
        stop = int(ends[0]) + 1 if len(ends) else len(pred)
        assert torch.equal(row[1:stop + 1], pred[:stop])
        assert (row[stop + 1:] == EOS).all()


def test_beam_1_equals_greedy(vanilla):
    src = torch.randint(2, V, (6, 5))
    pad = torch.ones(6, 5, dtype=torch.bool)
    pad[3, 3:] = False
    assert torch.equal(beam_search(vanilla, src, bos=BOS, eos=EOS, max_len=8, beam=1, src_padding=pad),
                       greedy_decode(vanilla, src, bos=BOS, eos=EOS, max_len=8, src_padding=pad))


def test_beam_finds_hypotheses_at_least_as_likely_as_greedy(vanilla):
    src = torch.randint(2, V, (8, 5))
    greedy = greedy_decode(vanilla, src, bos=BOS, eos=EOS, max_len=8)
    beam = beam_search(vanilla, src, bos=BOS, eos=EOS, max_len=8, beam=4)
    g, b = _teacher_forced_logprob(vanilla, src, greedy), _teacher_forced_logprob(vanilla, src, beam)
    assert (b >= g - 1e-4).all(), (b, g)
    assert (b > g + 1e-3).any(), "beam search should beat greedy somewhere on this fixture"


def test_exhaustive_beam_finds_the_most_likely_sequence(vanilla):
    max_len = 3
    src = torch.randint(2, V, (1, 5))
    best = beam_search(vanilla, src, bos=BOS, eos=EOS, max_len=max_len, beam=V * V)
    cands = torch.tensor([[BOS, *c] for c in itertools.product(range(V), repeat=max_len)])
    scores = _teacher_forced_logprob(vanilla, src.expand(len(cands), -1), cands)
    got = _teacher_forced_logprob(vanilla, src, best)
    torch.testing.assert_close(got, scores.max()[None], atol=1e-4, rtol=0)


def test_beam_arguments_are_checked(vanilla):
    src = torch.randint(2, V, (1, 4))
    with pytest.raises(ValueError, match="beam must be an integer >= 1, got 0"):
        beam_search(vanilla, src, bos=BOS, eos=EOS, max_len=4, beam=0)
    with pytest.raises(ValueError, match="max_len must be an integer >= 1, got 0"):
        beam_search(vanilla, src, bos=BOS, eos=EOS, max_len=0)
