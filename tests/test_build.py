"""build.py: specs become the parts they name, every core combination builds and
trains a step, and swapping the kernel changes no numbers."""
from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

import tfamily
from tfamily import build, members, registry
from tfamily.models import EncoderDecoder, LanguageModel
from tfamily.nn.feedforward import Chunked
from tfamily.nn.heads import QKVProjection, SharedQKProjection
from tfamily.nn.kernels import ReferenceKernel, SDPAKernel
from tfamily.nn.patterns import Causal, Full

V = 13
SMALL = dict(d_model=16, dropout=0.0, vocab_size=V, depth__n_layers=1, heads__n_heads=4, ff__d_ff=32)


def test_build_by_member_name(monkeypatch):
    monkeypatch.setitem(registry.MEMBERS._entries, "tiny", registry.Entry("tiny", lambda: members.gpt(**SMALL)))
    model = build("tiny")
    assert isinstance(model, LanguageModel) and model.embed.weight.shape == (V, 16)


@pytest.mark.parametrize("name", [m["name"] for m in members.describe()])
def test_every_model_carries_its_spec(name):
    heads = dict(heads__n_heads=2) if members.get(name)().choices()["heads"] != "none" else {}
    if members.get(name)().heads.n_kv_heads:  # grouped-query members: kv heads must divide the 2
        heads["heads__n_kv_heads"] = 1
    spec = members.get(name)(d_model=16, vocab_size=V, **heads)
    model = build(spec)
    assert model.spec is spec and "spec" not in model.state_dict()


def test_build_refuses_unknown_members_and_other_types():
    with pytest.raises(ValueError, match=r"unknown member 'gtp'; valid members: .*gpt"):
        build("gtp")
    with pytest.raises(ValueError, match=r"unknown member 'gtp'; valid members: .*bert.*gpt.*vanilla"):
        members.get("gtp")
    with pytest.raises(AttributeError, match=r"no member 'gtp'.*gpt"):
        members.gtp  # noqa: B018
    with pytest.raises(TypeError, match="got dict"):
        build({"member": "gpt"})


def test_encoder_decoder_wiring():
    model = build(members.vanilla(**SMALL, heads__n_kv_heads=2, kernel__name="reference",
                                  depth__n_enc_layers=2))
    assert isinstance(model, EncoderDecoder)
    enc, dec = model.encoder.blocks, model.decoder.blocks
    assert len(enc) == 2 and len(dec) == 1
    assert all(isinstance(b.attn.pattern, Full) and b.cross is None for b in enc)
    assert isinstance(dec[0].attn.pattern, Causal) and isinstance(dec[0].cross.pattern, Full)
    for attn in (enc[0].attn, dec[0].attn, dec[0].cross):
        assert isinstance(attn.kernel, ReferenceKernel) and attn.proj.n_kv_heads == 2
    assert model.head.tied is model.embed  # section 3.4: shared embedding and output weights
    assert isinstance(model.decoder.final_norm, nn.Identity)  # post-norm needs none


def test_decoder_and_encoder_wiring():
    gpt = build(members.gpt(**{**SMALL, "dropout": 0.1}, tie_embeddings=False, attn_dropout=0.2,
                            depth__checkpointing=True, ff__chunks=2))
    blk = gpt.stack.blocks[0]
    assert isinstance(blk.attn.pattern, Causal) and isinstance(blk.attn.kernel, SDPAKernel)
    assert gpt.head.tied is None and gpt.head.proj.weight is not gpt.embed.weight
    assert isinstance(gpt.stack.final_norm, nn.LayerNorm)  # pre-norm ends with a norm
    assert blk.attn.dropout == 0.2 and blk.attn_residual.drop.p == 0.1 and gpt.drop.p == 0.1
    assert gpt.stack.checkpointing and isinstance(blk.ff, Chunked) and blk.ff.chunks == 2
    bert = build(members.bert(**SMALL))
    assert isinstance(bert.stack.blocks[0].attn.pattern, Full)
    assert bert.objective.mask_id == V and bert.embed.weight.shape[0] == V + 1  # reserved [MASK]


@pytest.mark.parametrize("member", ["gpt", "bert", "vanilla"])
def test_reference_and_sdpa_kernels_give_the_same_model(member):
    make = members.get(member)
    ref = build(make(**SMALL, heads__n_kv_heads=2, kernel__name="reference"))
    fast = build(make(**SMALL, heads__n_kv_heads=2, kernel__name="sdpa"))
    fast.load_state_dict(ref.state_dict())
    x = torch.randint(0, V - 1, (2, 7))
    pad = torch.ones(2, 7, dtype=torch.bool)
    pad[1, 5:] = False
    outs = []
    for model in (ref, fast):
        if member == "vanilla":
            out = model(x, x[:, :5], src_padding=pad)
        else:
            out = model(x, key_padding=pad)
        out.square().mean().backward()
        outs.append(out)
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)
    for (name, a), b in zip(ref.named_parameters(), fast.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4, msg=name)


HEADS = {"mha": {}, "gqa": {"n_kv_heads": 2}, "mqa": {"n_kv_heads": 1}, "shared_qk": {"shared_qk": True}}


@pytest.mark.parametrize("pattern, kernel", list(itertools.product(["full", "causal"], ["reference", "sdpa"])))
def test_every_core_combination_builds_and_trains_a_step(pattern, kernel):
    for position, residual, heads in itertools.product(["sinusoidal", "learned", "none"],
                                                       ["post_norm", "pre_norm"], HEADS):
        spec = members.gpt(**SMALL, pattern__name=pattern, kernel__name=kernel, position__name=position,
                           residual__name=residual, heads=HEADS[heads])
        model = build(spec)
        proj = model.stack.blocks[0].attn.proj
        assert isinstance(proj, SharedQKProjection if heads == "shared_qk" else QKVProjection)
        x = torch.randint(0, V, (2, 5))
        loss, _ = model.loss({"x": x, "y": x})
        loss.backward()
        assert torch.isfinite(loss), spec.choices()
        assert all(p.grad is not None for p in model.parameters()), spec.choices()


def test_a_feed_forward_that_mixes_positions_is_causal_where_attention_is():
    def causal(model_stack):
        return [b.ff.inner.causal for b in model_stack.modules() if hasattr(b, "ff")]
    sepconv = dict(**SMALL, ff__name="sepconv")
    vanilla = build(members.vanilla(**sepconv))
    assert causal(vanilla.encoder) == [False] and causal(vanilla.decoder) == [True]
    assert causal(build(members.bert(**sepconv)).stack) == [False]
    window = {"name": "sliding_window", "params": {"window": 4, "causal": False}}
    assert causal(build(members.gpt(**sepconv, pattern=window)).stack) == [False]
    assert causal(build(members.gpt(**sepconv, pattern={"name": "sliding_window"})).stack) == [True]


def test_public_api():
    assert tfamily.build is build and tfamily.Spec is members.gpt().__class__
