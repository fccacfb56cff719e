"""Members transformer_xl and adaptive_span: their choices, small builds that run with
memory, and composition with other choices (GQA, sliding window, absolute positions)."""
from __future__ import annotations

import pytest
import torch

from tfamily import members
from tfamily.build import build
from tfamily.models.generate import generate
from tfamily.nn.patterns import AdaptiveSpan
from tfamily.nn.position import RelativePosition
from tfamily.nn.state import SegmentMemory

SMALL = dict(vocab_size=40, d_model=32, dropout=0.0, heads={"n_heads": 4}, depth={"n_layers": 2},
             ff={"d_ff": 64})


def test_members_are_registered_with_their_papers():
    xl, span = members.transformer_xl(), members.adaptive_span()
    assert "Dai et al. 2019" in xl.paper and "Sukhbaatar et al. 2019" in span.paper
    assert (xl.position.name, xl.state.name, xl.state.mem_len) == ("relative", "xl_memory", 512)
    assert span.pattern.name == "adaptive_span" and span.pattern.params["max_span"] == 8192
    assert span.state.mem_len >= span.pattern.params["max_span"] - 1  # memory covers the largest span
    names = {m["name"] for m in members.describe()}
    assert {"transformer_xl", "adaptive_span"} <= names


@pytest.mark.parametrize("name", ["transformer_xl", "adaptive_span"])
def test_small_member_trains_on_streams_and_generates(name):
    spec = members.get(name)(**SMALL, state={"mem_len": 12})
    if name == "adaptive_span":
        spec = spec.override({"pattern.params": {"max_span": 12, "ramp": 4, "init": 0.5}})
    torch.manual_seed(0)
    model = build(spec)
    assert all(isinstance(b.attn.position, RelativePosition) for b in model.stack.blocks)
    state = model.new_state()
    assert isinstance(state, SegmentMemory)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randint(0, 40, (3, 8))
    for _ in range(3):
        loss, metrics = model.loss({"x": x, "y": x.roll(-1, 1), "state": state})
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.after_step()
    assert torch.isfinite(loss) and max(state.memory_lengths) <= 12
    if name == "adaptive_span":
        spans = [m for m in model.modules() if isinstance(m, AdaptiveSpan)]
        assert len(spans) == 2 and any(k.startswith("aux/") for k in metrics)
        assert all(((s.spans() >= 0) & (s.spans() <= 12)).all() for s in spans)
    out = generate(model, x[:1, :4], 6, greedy=True)
    assert out.shape == (1, 10)


@pytest.mark.parametrize("overrides", [
    {"heads": {"n_heads": 4, "n_kv_heads": 2}},
    {"pattern": {"name": "sliding_window", "params": {"window": 5}}},
    {"position": {"name": "sinusoidal"}},
    {"kernel": {"name": "reference"}},
])
def test_xl_memory_composes_with_other_choices(overrides):
    spec = members.transformer_xl(**SMALL).replace(state={"mem_len": 64}, **overrides)
    torch.manual_seed(0)
    model = build(spec).eval()
    x = torch.randint(0, 40, (2, 18))
    state = model.new_state()
    segs = torch.cat([model(x[:, t:t + 6], state=state) for t in range(0, 18, 6)], 1)
    torch.testing.assert_close(segs, model(x), atol=1e-5, rtol=1e-5)


def test_longer_memory_at_evaluation_than_in_training():
    model = build(members.transformer_xl(**SMALL, state={"mem_len": 4})).eval()
    x = torch.randint(0, 40, (1, 24))
    short, long = model.new_state(), model.new_state(mem_len=16)
    for t in range(0, 24, 4):
        a, b = model(x[:, t:t + 4], state=short), model(x[:, t:t + 4], state=long)
    assert short.memory_lengths == [4, 4] and long.memory_lengths == [16, 16]
    assert not torch.allclose(a, b)
