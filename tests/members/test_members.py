"""Each member, built small, runs forward and backward with finite gradients on every
parameter, and learns a tiny task whose answer is in its input: GPT copies
``x SEP x``, the vanilla encoder-decoder copies source to target, BERT fills masked
tokens of a periodic sequence."""
from __future__ import annotations

import math

import pytest
import torch

import tfamily
from tfamily import members

V = 20
SMALL = dict(d_model=64, dropout=0.0, vocab_size=V, depth__n_layers=2, heads__n_heads=4, ff__d_ff=128)


def _gpt_batch(g, b=32, n=8):
    sep = V - 1
    x = torch.randint(0, V - 1, (b, n), generator=g)
    seq = torch.cat([x, torch.full((b, 1), sep), x], 1)
    mask = torch.zeros(b, 2 * n, dtype=torch.bool)
    mask[:, n:] = True  # only the second copy is predictable
    return {"x": seq[:, :-1], "y": seq[:, 1:], "loss_mask": mask}


def _vanilla_batch(g, b=32, n=8):
    bos, eos = V - 2, V - 1
    x = torch.randint(0, V - 2, (b, n), generator=g)
    return {"src": x, "tgt_in": torch.cat([torch.full((b, 1), bos), x], 1),
            "tgt_out": torch.cat([x, torch.full((b, 1), eos)], 1)}


def _bert_batch(g, b=32, period=4, reps=4):
    # [MASK] has its own id (V), so the data may use every id.
    return {"x": torch.randint(0, V, (b, period), generator=g).repeat(1, reps)}


TASKS = {  # member -> (extra overrides, batch maker, steps, lr)
    "gpt": (dict(position__max_len=64, heads__n_kv_heads=2), _gpt_batch, 150, 3e-3),
    "vanilla": ({}, _vanilla_batch, 250, 3e-3),
    "bert": (dict(objective__params={"mask_prob": 0.3}), _bert_batch, 150, 3e-3),
}


def _model(name):
    return tfamily.build(members.get(name)(**SMALL, **TASKS[name][0]))


def test_every_member_has_a_task_here():
    assert set(members.REGISTRY) >= set(TASKS)


@pytest.mark.parametrize("name", list(TASKS))
def test_member_forward_backward_all_parameters_get_finite_gradients(name):
    torch.manual_seed(0)
    model = _model(name)
    loss, metrics = model.loss(TASKS[name][1](torch.Generator().manual_seed(1)))
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert 0.0 <= metrics["acc"] <= 1.0 and metrics["tokens"] > 0
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{pname} got no gradient"
        assert torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, f"{pname} got an all-zero gradient"


@pytest.mark.parametrize("name", list(TASKS))
def test_member_learns_its_tiny_task(name):
    torch.manual_seed(0)
    model = _model(name)
    _, make_batch, steps, lr = TASKS[name]
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    first = None
    for _ in range(steps):
        loss, _ = model.loss(make_batch(g))
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        loss, metrics = model.loss(make_batch(torch.Generator().manual_seed(99), b=64))
    assert first > 0.8 * math.log(V)  # it started out not knowing
    assert loss.item() < 0.3 * first, (first, loss.item())
    assert metrics["acc"] > 0.9, metrics
