"""The Universal Transformer members, built small: one shared block, ACT on or off by the
depth name, the ponder cost reaching the loss of the decoder and of both sides of the
encoder-decoder, cached decoding equal to recomputation, invalid pairs refused. The
separable-convolution transition (ff 'sepconv', section 2.1) with every depth: decoding from
the cache equals recomputation, the decoder never looks ahead, encoders never read pads."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tfamily
from tfamily import members
from tfamily.models.generate import beam_search, generate, greedy_decode
from tfamily.nn.depth import Universal, UniversalACT

V = 20
SMALL = dict(d_model=32, dropout=0.0, vocab_size=V, depth__n_layers=3, heads__n_heads=4, ff__d_ff=64)


def _seq2seq_batch(g, b=8, n=6):
    bos, eos = V - 2, V - 1
    x = torch.randint(0, V - 2, (b, n), generator=g)
    return {"src": x, "tgt_in": torch.cat([torch.full((b, 1), bos), x], 1),
            "tgt_out": torch.cat([x, torch.full((b, 1), eos)], 1)}


def _lm_batch(g, b=8, n=10):
    x = torch.randint(0, V, (b, n + 1), generator=g)
    return {"x": x[:, :-1], "y": x[:, 1:]}


@pytest.mark.parametrize("name,depth,kind", [
    ("universal_transformer", "universal", Universal), ("universal_transformer", "universal_act", UniversalACT),
    ("universal_transformer_lm", "universal_act", UniversalACT), ("universal_transformer_lm", "universal", Universal)])
def test_act_on_or_off_is_one_choice_and_every_parameter_learns(name, depth, kind):
    torch.manual_seed(0)
    model = tfamily.build(members.get(name)(**SMALL, depth__name=depth)).train()
    stacks = [model.encoder, model.decoder] if name == "universal_transformer" else [model.stack]
    assert all(isinstance(s, kind) and len(s) == 3 for s in stacks)
    batch = (_seq2seq_batch if name == "universal_transformer" else _lm_batch)(torch.Generator().manual_seed(1))
    loss, metrics = model.loss(batch)
    ponder = {k for k in metrics if k.startswith("aux/")}
    expected = set() if kind is Universal else (
        {"aux/encoder", "aux/decoder"} if name == "universal_transformer" else {"aux/stack"})
    assert ponder == expected, metrics
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname
    if kind is UniversalACT:
        assert all(1 <= s.steps_executed <= 3 for s in stacks)
        assert all(s.halting.linear.bias.grad.abs() > 0 for s in stacks)  # the ponder cost reaches it


def test_weights_are_shared_across_steps():
    one = tfamily.build(members.universal_transformer_lm(**SMALL, depth__name="universal"))
    many = tfamily.build(members.universal_transformer_lm(**{**SMALL, "depth__n_layers": 7},
                                                          depth__name="universal"))
    assert sum(p.numel() for p in one.parameters()) == sum(p.numel() for p in many.parameters())


@pytest.mark.parametrize("depth", ["universal", "universal_act"])
def test_cached_generation_equals_recomputation(depth):
    torch.manual_seed(2)
    model = tfamily.build(members.universal_transformer_lm(**SMALL, depth__name=depth))
    prompt = torch.randint(0, V, (2, 4))
    cached = generate(model, prompt, 6, greedy=True)
    assert torch.equal(cached, generate(model, prompt, 6, greedy=True, use_cache=False))
    model.eval()
    with torch.no_grad():
        full = model(cached[:, :-1])
        state = model.new_state()
        steps = torch.cat([model(cached[:, i:i + 1], state=state) for i in range(cached.shape[1] - 1)], dim=1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("depth", ["universal", "universal_act"])
def test_encoder_decoder_cached_greedy_decoding_equals_recomputation(depth):
    torch.manual_seed(3)
    model = tfamily.build(members.universal_transformer(**SMALL, depth__name=depth)).eval()
    src = torch.randint(0, V - 2, (2, 5))
    out = greedy_decode(model, src, bos=V - 2, eos=V - 1, max_len=6)
    with torch.no_grad():
        memory = model.encode(src)
        seq = torch.full((2, 1), V - 2)
        for _ in range(out.shape[1] - 1):
            nxt = model.decode(seq, memory)[:, -1].argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
    done = torch.cumsum(seq == V - 1, dim=1) > 0  # after eos greedy_decode pads with eos
    assert torch.equal(out[~done], seq[~done])


def test_invalid_pairs_are_refused_naming_both_choices():
    with pytest.raises(ValueError, match="universal.*xl_memory"):
        members.universal_transformer_lm(**SMALL, state=dict(name="xl_memory", mem_len=8))
    with pytest.raises(ValueError, match="checkpointing"):
        members.universal_transformer(**SMALL, depth__checkpointing=True)
    with pytest.raises(ValueError, match="eps"):
        members.universal_transformer_lm(**SMALL, depth__params={"eps": 1.5})
    with pytest.raises(ValueError, match="unknown depth.params"):
        members.universal_transformer(**SMALL, depth__params={"eps": 0.1})  # ACT off: no halting params
    spec = members.universal_transformer_lm(**SMALL, depth__params={"ponder_weight": 0.1, "halting_bias": 0.5})
    ut = tfamily.build(spec).stack
    assert ut.ponder_weight == 0.1 and ut.halting.linear.bias.item() == 0.5


# -- the separable-convolution transition (Dehghani et al. 2019, section 2.1; t2t's sepconv_relu_sepconv)

SEPCONV = dict(ff__name="sepconv", ff__params={"kernel_size": 3})
LMS = [("universal_transformer_lm", "universal"), ("universal_transformer_lm", "universal_act"),
       ("gpt", "stack"), ("gpt", "reversible")]


def _sepconv(name, depth, seed=0):
    torch.manual_seed(seed)
    return tfamily.build(members.get(name)(**SMALL, **SEPCONV, depth__name=depth)).double().eval()


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name,depth", LMS)
@torch.no_grad()
def test_sepconv_decoding_from_the_cache_equals_recomputation(name, depth, seed):
    model = _sepconv(name, depth, seed)
    x = torch.randint(0, V, (2, 13), generator=torch.Generator().manual_seed(seed))
    full = model(x)
    for pieces in ([1] * 13, [2, 3, 2, 3, 1, 2]):
        state = model.new_state()
        steps = torch.cat([model(c, state=state) for c in torch.split(x, pieces, dim=1)], dim=1)
        torch.testing.assert_close(steps, full, atol=1e-10, rtol=1e-10)
    prompt = x[:, :3]
    assert torch.equal(generate(model, prompt, 7, greedy=True),
                       generate(model, prompt, 7, greedy=True, use_cache=False))


@pytest.mark.parametrize("name,depth", LMS)
@torch.no_grad()
def test_sepconv_decoder_never_looks_ahead(name, depth):
    model, j = _sepconv(name, depth), 6
    x = torch.randint(0, V, (2, 11))
    y = x.clone()
    y[:, j] = (x[:, j] + 1) % V
    a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :j], b[:, :j])
    assert not torch.allclose(a[:, j], b[:, j])


@pytest.mark.parametrize("name,depth", [("bert", "stack"), ("bert", "reversible"),
                                        ("universal_transformer", "universal"),
                                        ("universal_transformer", "universal_act")])
@torch.no_grad()
def test_sepconv_encoder_never_reads_pad_tokens(name, depth):
    over = {"residual": {"name": "pre_norm"}} if depth == "reversible" else {}
    torch.manual_seed(0)
    model = tfamily.build(members.get(name)(**SMALL, **SEPCONV, **over, depth__name=depth)).double().eval()
    src = torch.randint(0, V - 2, (2, 9))
    pad = torch.ones(2, 9, dtype=torch.bool)
    pad[1, 5:] = False
    other = src.clone()
    other[1, 5:] = (src[1, 5:] + 1) % (V - 2)
    encode = (lambda s, p: model(s, key_padding=p)) if name == "bert" else model.encode
    torch.testing.assert_close(encode(src, pad)[pad], encode(other, pad)[pad])
    assert not torch.allclose(encode(src, None)[1, :5], encode(other, None)[1, :5])  # unmasked, real ones see the edit


class _Tokens:
    """``_Recompute``'s state: the target tokens fed so far, reordered with the beams."""
    tokens = None

    def reorder(self, index):
        self.tokens = self.tokens[index]


class _Recompute(nn.Module):
    """The encoder-decoder without a cache: each step reruns the decoder over every token so far."""

    def __init__(self, model):
        super().__init__()
        self.model, self.embed = model, model.embed

    def encode(self, src, src_padding=None):
        return self.model.encode(src, src_padding)

    def new_state(self):
        return _Tokens()

    def decode(self, tgt, memory, *, src_padding=None, state=None):
        state.tokens = tgt if state.tokens is None else torch.cat([state.tokens, tgt], dim=1)
        return self.model.decode(state.tokens, memory, src_padding=src_padding)


@pytest.mark.parametrize("depth", ["universal", "universal_act"])
def test_sepconv_encoder_decoder_trains_and_decodes_from_the_cache_as_recomputed(depth):
    torch.manual_seed(3)
    # Untied: a tied random model mostly repeats its input token, so its decodes would be trivial.
    spec = members.universal_transformer(**SMALL, **SEPCONV, depth__name=depth, tie_embeddings=False)
    model = tfamily.build(spec).train()
    assert not model.encoder.block.ff.inner.causal and model.decoder.block.ff.inner.causal
    loss, _ = model.loss(_seq2seq_batch(torch.Generator().manual_seed(1)))
    loss.backward()
    assert torch.isfinite(loss)
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname
    model = model.double().eval()
    src, tgt = torch.randint(0, V - 2, (3, 7)), torch.randint(0, V, (3, 6))
    pad = torch.ones(3, 7, dtype=torch.bool)
    pad[2, 4:] = False
    with torch.no_grad():
        memory, state, p = model.encode(src, pad), model.new_state(), pad
        for t in range(6):
            if t in (2, 4):  # as in beam search: rows move and repeat, and the state follows them
                index = torch.tensor([2, 0, 0] if t == 2 else [1, 2, 1])
                state.reorder(index)
                tgt, memory, p = tgt[index], memory[index], p[index]
            step = model.decode(tgt[:, t:t + 1], memory, src_padding=p, state=state)[:, -1]
            torch.testing.assert_close(step, model.decode(tgt[:, :t + 1], memory, src_padding=p)[:, -1],
                                       atol=1e-10, rtol=1e-10)
    kw = dict(bos=V - 2, eos=V - 1, max_len=8, src_padding=pad)
    assert torch.equal(greedy_decode(model, src, **kw), greedy_decode(_Recompute(model), src, **kw))
    for beam in (2, 4):
        assert torch.equal(beam_search(model, src, beam=beam, **kw),
                           beam_search(_Recompute(model), src, beam=beam, **kw))
