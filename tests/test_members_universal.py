"""The Universal Transformer members, built small: one shared block, ACT on or off by the
depth name, the ponder cost reaching the loss of the decoder and of both sides of the
encoder-decoder, cached decoding equal to recomputation, invalid pairs refused."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily import members
from tfamily.models.generate import generate, greedy_decode
from tfamily.nn.universal import Universal, UniversalACT

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
