"""The attentional recurrent decoders (models/rnn_decoders.py): which state scores the
source (Bahdanau: the previous one, Luong: the current one), step-by-step decoding with the
state equals the teacher-forced pass, and source padding is invisible."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily import members

V = 11
VARIANTS = {
    "luong_general_feeding": dict(alignment="general", attend="luong", input_feeding=True),
    "luong_dot": dict(alignment="dot", attend="luong", input_feeding=False),
    "luong_concat": dict(alignment="concat", attend="luong", input_feeding=True),
    "bahdanau_additive_bi": dict(alignment="additive", attend="bahdanau", bidirectional=True),
    "bahdanau_general": dict(alignment="general", attend="bahdanau"),
    "sutskever_none": dict(alignment="none", attend="luong", input_feeding=False),
}


def model(params: dict, cell: str = "lstm", seed: int = 0, n_layers: int = 2):
    torch.manual_seed(seed)
    spec = members.luong_attention(vocab_size=V, d_model=16, dropout=0.0,
                                   depth={"name": cell, "n_layers": n_layers, "params": params})
    return tfamily.build(spec).eval()


def pair(seed: int, b: int = 3, m: int = 7, n: int = 6):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, V, (b, m), generator=g)
    lengths = torch.randint(2, m + 1, (b,), generator=g)
    lengths[0] = m
    padding = torch.arange(m)[None] < lengths[:, None]
    return src, padding, torch.randint(0, V, (b, n), generator=g)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_bahdanau_weights_at_step_i_ignore_the_token_fed_at_step_i_luongs_do_not(seed, cell):
    src, padding, tgt = pair(seed)
    i = 3
    changed = tgt.clone()
    changed[:, i] = (changed[:, i] + 1) % V
    bahdanau = model(VARIANTS["bahdanau_additive_bi"], cell, seed)
    a, b = bahdanau.alignments(src, tgt, padding), bahdanau.alignments(src, changed, padding)
    assert torch.equal(a[:, :i + 1], b[:, :i + 1])    # scored by s_{i-1}: before the token enters
    assert not torch.equal(a[:, i + 1], b[:, i + 1])
    for name in ("luong_general_feeding", "luong_dot", "luong_concat"):
        luong = model(VARIANTS[name], cell, seed)
        a, b = luong.alignments(src, tgt, padding), luong.alignments(src, changed, padding)
        assert torch.equal(a[:, :i], b[:, :i])         # causal
        assert not torch.equal(a[:, i], b[:, i])       # scored by h_t, after the token entered


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("seed", [0, 1])
def test_decoding_step_by_step_with_the_state_equals_the_teacher_forced_pass(name, seed):
    net = model(VARIANTS[name], "lstm", seed)
    src, padding, tgt = pair(seed)
    with torch.no_grad():
        full = net(src, tgt, src_padding=padding)
        memory, state = net.encode(src, padding), net.new_state()
        cuts = [0, 1, 3, 4, tgt.shape[1]]
        steps = [net.decode(tgt[:, a:b], memory, state=state) for a, b in zip(cuts, cuts[1:])]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-6)
    assert state.offset == tgt.shape[1]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_source_padding_is_invisible_and_gets_zero_weight(name):
    net = model(VARIANTS[name], "gru", 3)
    src, padding, tgt = pair(5)
    junk = torch.where(padding, src, (src + 3) % V)  # other tokens under the padding
    with torch.no_grad():
        a = net(src, tgt, src_padding=padding)
        b = net(junk, tgt, src_padding=padding)
        alone = net(src[1:2, :int(padding[1].sum())], tgt[1:2])
    assert torch.allclose(a, b, atol=1e-6)
    assert torch.allclose(a[1:2], alone, atol=1e-5)
    if VARIANTS[name]["alignment"] != "none":
        w = net.alignments(src, tgt, padding)
        assert torch.equal(w.masked_select(~padding[:, None, :].expand_as(w)), torch.zeros(int((~padding).sum()) * 6))
        assert torch.allclose(w.sum(-1), torch.ones(3, 6))


def test_gradients_reach_every_parameter():
    for name, params in VARIANTS.items():
        net = model(params, "lstm", 0).train()
        src, padding, tgt = pair(0)
        loss, _ = net.loss({"src": src, "src_padding": padding, "tgt_in": tgt, "tgt_out": tgt.roll(-1, 1)})
        loss.backward()
        missing = [n for n, p in net.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
        assert not missing, (name, missing)


@pytest.mark.parametrize("params, match", [
    (dict(attend="bahdanau", alignment="none"), "needs an alignment score"),
    (dict(attend="luong", bidirectional=True), "unidirectional"),
    (dict(attend="bahdanau", alignment="dot", bidirectional=True), "'dot' with a bidirectional"),
    (dict(attend="both"), "'luong' .* or 'bahdanau'"),
    (dict(alignment="cosine"), "unknown alignment 'cosine'"),
    (dict(input_feeding="yes"), "must be true or false"),
    (dict(heads=3), r"unknown depth.params \['heads'\]"),
])
def test_bad_choices_are_refused_naming_the_fix(params, match):
    with pytest.raises((ValueError, TypeError), match=match):
        members.luong_attention(depth__params=params)


def test_positions_are_refused_for_a_recurrent_encoder_decoder():
    with pytest.raises(ValueError, match="set position 'none'"):
        members.luong_attention(position__name="sinusoidal")


def test_span_corruption_trains_the_recurrent_encoder_decoder_with_its_reserved_ids():
    torch.manual_seed(0)
    net = tfamily.build(members.bahdanau_attention(vocab_size=V, d_model=16, objective__name="span_corruption"))
    assert net.embed.vocab_size > V  # T5's sentinels get rows of their own
    loss, _ = net.loss({"x": torch.randint(0, V, (2, 30), generator=torch.Generator().manual_seed(1))})
    loss.backward()
    assert torch.isfinite(loss)
