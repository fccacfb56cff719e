"""Adaptive attention span (Sukhbaatar et al. 2019): the soft mask, its equivalence to
mask-and-renormalise, trimming, clamping, the dynamic variant, and XL memory."""
from __future__ import annotations

import pytest
import torch

from tfamily.build import build
from tfamily.nn.attention import Attention
from tfamily.nn.heads import QKVProjection
from tfamily.nn.kernels import ReferenceKernel, SDPAKernel
from tfamily.nn.patterns import AdaptiveSpan, SlidingWindow, SoftPatternKernel
from tfamily.nn.position import RelativePosition
from tfamily.spec import Spec

D, H, E = 32, 4, 8


def span_attention(span: AdaptiveSpan, kernel=None, position=None) -> Attention:
    torch.manual_seed(1)
    return Attention(QKVProjection(D, H, H, E), SoftPatternKernel(kernel or SDPAKernel()), span, D,
                     position=position)


def set_spans(span: AdaptiveSpan, z: list[float]) -> None:
    with torch.no_grad():
        span.span_frac.copy_(torch.tensor(z) / span.max_span)


def test_full_span_equals_unmasked_attention_over_the_window():
    # z = S: the ramp is 1 on every distance 0..S-1, so only the hard window remains.
    span = AdaptiveSpan(H, E, max_span=10, ramp=64, init=1.0)
    x, mem = torch.randn(2, 7, D), torch.randn(2, 12, D)
    soft = span_attention(span)
    torch.manual_seed(1)
    plain = Attention(QKVProjection(D, H, H, E), SDPAKernel(), SlidingWindow(window=10), D)
    torch.testing.assert_close(soft(x, memory=mem), plain(x, memory=mem), atol=1e-5, rtol=1e-5)


def test_soft_mask_is_mask_times_softmax_renormalised():
    span = AdaptiveSpan(H, E, max_span=16, ramp=4)
    set_spans(span, [0.0, 3.5, 7.0, 16.0])
    a = span_attention(span, ReferenceKernel())
    a.record_weights = True
    x, mem = torch.randn(1, 5, D), torch.randn(1, 9, D)
    a(x, memory=mem)
    got = a.last_weights
    # The paper's form: a = m_z(t - r) * softmax(s) / sum.
    q, (k, _) = a.proj.q(x), a.proj.kv(torch.cat([mem, x], 1))
    s = (q @ k.transpose(-1, -2)) / E ** 0.5
    dist = (9 + torch.arange(5))[:, None] - torch.arange(14)[None, :]
    z = (span.span_frac * 16)[:, None, None]
    ramp = ((4 + z - dist) / 4).clamp(0, 1) * ((dist >= 0) & (dist < 16))
    w = s.masked_fill(dist < 0, float("-inf")).softmax(-1) * ramp
    torch.testing.assert_close(got, w / w.sum(-1, keepdim=True), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dynamic", [False, True])
def test_trimming_changes_no_output(dynamic):
    span = AdaptiveSpan(H, E, max_span=64, ramp=4, init=0.1, dynamic=dynamic)
    if not dynamic:
        set_spans(span, [2.0, 5.0, 1.0, 6.5])
    a = span_attention(span, position=RelativePosition(D, H, E))
    x, mem = torch.randn(2, 6, D, requires_grad=True), torch.randn(2, 40, D)
    seen = []
    inner = a.kernel.inner
    a.kernel.inner = lambda q, k, v, **kw: (seen.append(k.shape[-2]), inner(q, k, v, **kw))[1]
    trimmed = a(x, memory=mem)
    span.trim = False
    full = a(x, memory=mem)
    reach = span.reach()
    assert seen[0] < seen[1] == 46 and seen[0] == reach - 1 + 6  # keys the first query can reach
    torch.testing.assert_close(trimmed, full, atol=1e-6, rtol=1e-6)
    params = [x] + [p for p in a.parameters()]
    g1 = torch.autograd.grad(trimmed.square().sum(), params, allow_unused=True)
    g2 = torch.autograd.grad(full.square().sum(), params, allow_unused=True)
    for u, v in zip(g1, g2):
        if u is not None:
            torch.testing.assert_close(u, v, atol=1e-5, rtol=1e-5)


def test_spans_learn_and_stay_inside_0_S():
    span = AdaptiveSpan(H, E, max_span=8, ramp=2, init=0.5, l1=1.0)
    a = span_attention(span)
    opt = torch.optim.SGD(a.parameters(), lr=50.0)
    x = torch.randn(2, 10, D)
    moved = False
    for step in range(6):
        target = -1.0 if step < 3 else 1.0  # push spans down, then up
        loss = target * a(x).sum() + (span.aux_loss() if step < 3 else -span.aux_loss() * 100)
        opt.zero_grad()
        loss.backward()
        before = span.spans().detach().clone()
        opt.step()
        span.after_step()
        z = span.spans().detach()
        moved |= not torch.equal(before, z)
        assert (z >= 0).all() and (z <= 8).all()
    assert moved


def test_l1_penalty_shrinks_spans():
    span = AdaptiveSpan(H, E, max_span=100, ramp=4, init=0.5, l1=1e-2)
    span.aux_loss().backward()
    assert (span.span_frac.grad > 0).all()  # gradient descent lowers every span


def test_dynamic_spans_follow_the_input():
    span = AdaptiveSpan(H, E, max_span=32, ramp=4, init=0.2, dynamic=True)
    with torch.no_grad():
        span.gate.weight.normal_()
    a = span_attention(span)
    a(torch.randn(2, 5, D), memory=torch.randn(2, 30, D))
    z = span.last_spans
    assert z.shape == (2, H, 5) and (z >= 0).all() and (z <= 32).all()
    assert z.std() > 0  # z_t = S sigmoid(v . x_t + b) varies with t
    assert span.aux_loss().requires_grad


def test_memory_keeps_only_what_the_spans_reach():
    spec = Spec(member="t", vocab_size=32, d_model=D, dropout=0.0, heads={"n_heads": H},
                position={"name": "relative"}, depth={"n_layers": 2},
                pattern={"name": "adaptive_span", "params": {"max_span": 48, "ramp": 4}},
                state={"name": "xl_memory", "mem_len": 48})
    torch.manual_seed(0)
    model = build(spec).eval()
    spans = [b.attn.pattern for b in model.stack.blocks]
    set_spans(spans[0], [3.0, 1.0, 0.0, 2.0])
    set_spans(spans[1], [20.0, 6.0, 9.0, 2.0])
    x = torch.randint(0, 32, (2, 56))
    st = model.new_state()
    out = torch.cat([model(x[:, t:t + 8], state=st) for t in range(0, 56, 8)], 1)
    assert st.memory_lengths == [6, 23]  # ceil(max z + R) - 1 per layer
    # The full-length memory gives the same outputs: nothing cut was visible.
    st_full = model.new_state()
    st_full.limits = [None, None]
    for s in spans:
        s.trim = False
    ref = torch.cat([model(x[:, t:t + 8], state=st_full) for t in range(0, 56, 8)], 1)
    assert st_full.memory_lengths == [48, 48]
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_model_adds_the_penalty_in_training_only():
    spec = Spec(member="t", vocab_size=32, d_model=D, dropout=0.0, heads={"n_heads": H},
                position={"name": "relative"}, depth={"n_layers": 2},
                pattern={"name": "adaptive_span", "params": {"max_span": 16, "ramp": 4, "init": 0.5,
                                                             "l1": 0.1}})
    model = build(spec)
    x = torch.randint(0, 32, (2, 8))
    batch = {"x": x, "y": x}
    train_loss, metrics = model.train().loss(batch)
    eval_loss, _ = model.eval().loss(batch)
    penalty = sum(model.aux_losses().values())
    torch.testing.assert_close(train_loss - eval_loss, penalty.detach(), atol=1e-6, rtol=1e-5)
    assert sum(k.startswith("aux/") for k in metrics) == 2
    with torch.no_grad():
        model.stack.blocks[0].attn.pattern.span_frac.fill_(3.0)
    model.after_step()
    assert model.stack.blocks[0].attn.pattern.spans().max() == 16


def test_validation():
    with pytest.raises(ValueError, match="max_span"):
        AdaptiveSpan(H, E, max_span=0)
    with pytest.raises(ValueError, match="init"):
        AdaptiveSpan(H, E, max_span=8, init=2.0)
    with pytest.raises(ValueError, match="ramp"):
        AdaptiveSpan(H, E, max_span=8, ramp=0)
