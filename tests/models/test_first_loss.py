"""Initialisation: every member's untrained loss is near a uniform guess, ln V.

Before the tied head read h / sqrt(d) (nn/embedding/head.py), an untrained model predicted
its own input token: GPT at d 768 started at 18 nats on 65 symbols (ln 65 = 4.17).

The papers whose recipe is a post-norm stack under a tied head without a scale (the Transformer,
Transformer-XL, the Universal Transformer, the Image Transformer) keep that prior: their final
norm's output points along the input token's own embedding, so its logit is about sqrt(d) |e|.
Those members are held to their papers' recipe, and the test checks the prior instead."""
from __future__ import annotations

import math

import pytest
import torch

import tfamily
from tfamily import members

V = 65


def _batch(spec, g, b=4, n=48):
    seq = torch.randint(0, V, (b, n + 1), generator=g)
    if spec.model == "encoder_decoder":
        src = torch.randint(0, V, (b, n), generator=g)
        return {"src": src, "tgt_in": seq[:, :-1], "tgt_out": seq[:, 1:]}
    if spec.objective.name == "masked_lm":
        return {"x": seq[:, :-1]}
    return {"x": seq[:, :-1], "y": seq[:, 1:]}


def _first_loss(spec, seed=0) -> float:
    torch.manual_seed(seed)
    model = tfamily.build(spec).eval()
    with torch.no_grad():
        loss, _ = model.loss(_batch(spec, torch.Generator().manual_seed(seed)))
    return loss.item()


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", list(members.REGISTRY))
def test_every_member_starts_near_uniform(name, seed):
    kv = {"heads__n_kv_heads": 1} if members.get(name)().heads.n_kv_heads else {}  # grouped-query members
    spec = members.get(name)(vocab_size=V, d_model=128, depth__n_layers=2, heads__n_heads=4, **kv)
    loss = _first_loss(spec, seed)
    _check(spec, loss)


def _own_token_prior(spec) -> bool:
    # BERT's masked-LM head reads through its own dense + LayerNorm transform first.
    return (spec.tie_embeddings and not spec.logit_scale and spec.residual.name == "post_norm"
            and spec.objective.name != "masked_lm")


def _check(spec, loss):
    if _own_token_prior(spec):
        assert loss > math.log(V), (spec.member, loss, math.log(V))
    else:
        assert abs(loss - math.log(V)) < 0.05 * math.log(V), (spec.member, spec.d_model, loss, math.log(V))


@pytest.mark.parametrize("name", ["gpt", "vanilla", "bert", "transformer_xl"])
def test_member_at_its_default_width_starts_near_uniform(name):
    # The own-token logit grew with width (sqrt(d) |e|), so check the papers' widths too.
    spec = members.get(name)(vocab_size=V, depth__n_layers=2)
    _check(spec, _first_loss(spec))
