"""Transformer-XL segment memory: the state policy, and how it threads through a
model (segments, gradients, causality, generation) and composes with other choices."""
from __future__ import annotations

import pytest
import torch

from tfamily.build import build
from tfamily.models.generate import generate
from tfamily.nn.state import LayerState, SegmentMemory, next_memory
from tfamily.spec import Spec


def tiny(mem_len=64, **kw) -> torch.nn.Module:
    spec = dict(member="t", model="decoder", vocab_size=32, d_model=32, dropout=0.0,
                pattern={"name": "causal"}, position={"name": "relative"}, heads={"n_heads": 4},
                residual={"name": "pre_norm"}, depth={"n_layers": 2},
                state={"name": "xl_memory", "mem_len": mem_len}, ff={"d_ff": 64})
    spec.update(kw)
    torch.manual_seed(0)
    return build(Spec.from_dict(spec)).eval()


def segments(model, tokens, seg, state):
    return torch.cat([model(tokens[:, t:t + seg], state=state) for t in range(0, tokens.shape[1], seg)], 1)


def test_next_memory_keeps_the_newest_detached():
    mem, x = torch.randn(2, 3, 4), torch.randn(2, 5, 4, requires_grad=True)
    out = next_memory(mem, x, 6)
    assert torch.equal(out, torch.cat([mem, x], 1)[:, -6:]) and not out.requires_grad
    assert next_memory(None, x, 9).shape[1] == 5
    assert next_memory(mem, x, 0) is None


def test_segment_memory_state():
    st = SegmentMemory(2, 4)
    assert isinstance(st[0], LayerState) and st.memory_lengths == [0, 0]
    for s in st:
        s.inputs = torch.randn(1, 3, 8)
    st.advance(3)
    assert st.memory_lengths == [3, 3] and st.offset == 3 and st[0].inputs is None
    st.reset()
    assert st.memory_lengths == [0, 0] and st.offset == 0
    with pytest.raises(ValueError, match="mem_len"):
        SegmentMemory(2, -1)
    with pytest.raises(ValueError, match="limits"):
        SegmentMemory(2, 4, [None])


def test_new_state_follows_the_spec():
    model = tiny(mem_len=16)
    st = model.new_state()
    assert isinstance(st, SegmentMemory) and st.mem_len == 16
    assert model.new_state(mem_len=40).mem_len == 40  # longer memory at evaluation
    plain = tiny(state={"name": "kv_cache"})
    assert not isinstance(plain.new_state(), SegmentMemory)
    with pytest.raises(ValueError, match="xl_memory"):
        Spec(member="t", model="encoder_decoder", objective={"name": "seq2seq"}, state={"name": "xl_memory"})


def test_mem_len_zero_is_exactly_the_model_without_memory():
    model = tiny(mem_len=0)
    x = torch.randint(0, 32, (2, 12))
    st = model.new_state()
    for t in range(0, 12, 4):
        assert torch.equal(model(x[:, t:t + 4], state=st), model(x[:, t:t + 4]))
    assert st.memory_lengths == [0, 0]


@pytest.mark.parametrize("kw", [
    {},                                                                  # relative positions
    {"position": {"name": "sinusoidal"}},                                # absolute, offset by the state
    {"heads": {"n_heads": 4, "n_kv_heads": 2}},                          # grouped-query
    {"residual": {"name": "post_norm"}},
])
def test_segments_with_full_memory_equal_one_pass(kw):
    model = tiny(mem_len=64, **kw)
    x = torch.randint(0, 32, (2, 15))
    torch.testing.assert_close(segments(model, x, 5, model.new_state()), model(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", [{"name": "sdpa"}, {"name": "blocksparse", "params": {"block_size": 4}}])
def test_sliding_window_with_short_memory_is_exact(kernel):
    # A window of w keys per layer needs only the w - 1 previous layer inputs, so a memory of
    # w - 1 reproduces the full pass exactly, however long the stream (the XL context grows
    # as w per layer, section 3.2).
    w = 6
    model = tiny(mem_len=w - 1, pattern={"name": "sliding_window", "params": {"window": w}}, kernel=kernel)
    x = torch.randint(0, 32, (1, 24))
    st = model.new_state()
    torch.testing.assert_close(segments(model, x, 8, st), model(x), atol=1e-5, rtol=1e-5)
    assert st.memory_lengths == [w - 1, w - 1]


def test_no_gradient_flows_into_memory():
    model = tiny().train()
    x = torch.randint(0, 32, (2, 16))
    st = model.new_state()
    model(x[:, :8], state=st)
    assert all(s.memory is not None and s.memory.grad_fn is None and not s.memory.requires_grad for s in st)
    frozen = [s.memory.clone() for s in st]
    model(x[:, 8:], state=st).square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    # The same loss with a constant memory gives the same gradients: nothing reached segment 1.
    model.zero_grad()
    st2 = model.new_state()
    for s, m in zip(st2, frozen):
        s.memory = m
    model(x[:, 8:], state=st2).square().mean().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], msg=n)


def test_causality_across_segments():
    model = tiny(mem_len=8)
    x = torch.randint(0, 32, (2, 20))
    y = x.clone()
    y[:, 13:] = torch.randint(0, 32, (2, 7))  # change the future from the middle of segment 3
    a = segments(model, x, 5, model.new_state())
    b = segments(model, y, 5, model.new_state())
    assert torch.equal(a[:, :13], b[:, :13])
    assert not torch.allclose(a[:, 13:], b[:, 13:])


def test_truncated_memory_still_reaches_back_further_than_one_segment():
    # With 2 layers and memory 4, the last token of segment 3 depends on segment 2's start
    # (through layer 1's memory), though it never attends to it directly in layer 2.
    model = tiny(mem_len=4)
    x = torch.randint(0, 32, (1, 12))
    y = x.clone()
    y[:, 3] = (x[:, 3] + 1) % 32
    a = segments(model, x, 4, model.new_state())
    b = segments(model, y, 4, model.new_state())
    assert not torch.allclose(a[:, 11], b[:, 11])


@pytest.mark.parametrize("kw", [{}, {"heads": {"n_heads": 4, "n_kv_heads": 1}}])
def test_generation_with_memory_equals_recomputing_the_visible_context(kw):
    model = tiny(mem_len=64, **kw)
    prompt = torch.randint(0, 32, (2, 5))
    with_memory = generate(model, prompt, 10, greedy=True)
    recomputed = generate(model, prompt, 10, greedy=True, use_cache=False)
    assert torch.equal(with_memory, recomputed)
    # And the logits of every step agree with one pass over the whole visible context.
    st = model.new_state()
    steps = [model(with_memory[:, :5], state=st)] + [model(with_memory[:, t:t + 1], state=st)
                                                    for t in range(5, 15)]
    torch.testing.assert_close(torch.cat(steps, 1), model(with_memory), atol=1e-4, rtol=1e-4)


def test_generation_with_truncated_memory_sees_the_window_plus_recurrence():
    model = tiny(mem_len=6)
    tokens = torch.randint(0, 32, (1, 20))
    st = model.new_state()
    for t in range(20):
        last = model(tokens[:, t:t + 1], state=st)[:, -1]
    assert st.memory_lengths == [6, 6]
    # One layer sees mem_len + 1 tokens; the recurrence through lower layers' memory reaches
    # further back, so the result differs from recomputing only the last 7 tokens.
    short = model(tokens[:, -7:])[:, -1]
    assert not torch.allclose(last, short, atol=1e-6)


def test_memory_trains_on_contiguous_streams():
    from tfamily.data import StreamBatches
    model = tiny(mem_len=8).train()
    data = torch.randint(0, 32, (400,))
    batches = StreamBatches(data, seq_len=8, batch_size=4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    st = model.new_state()
    losses = []
    for x, y in batches:
        loss, _ = model.loss({"x": x, "y": y, "state": st})
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert st.offset == 8 * len(batches) and st.memory_lengths == [8, 8]
    assert all(torch.isfinite(torch.tensor(losses)))


# -- the State protocol: reset(rows), reorder(index), state_dict / load_state_dict -------------

@pytest.mark.parametrize("mem_len", [8, 16])
@pytest.mark.parametrize("seed", [0, 1])
def test_reset_rows_forgets_only_those_rows(mem_len, seed):
    model = tiny(mem_len=mem_len)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 32, (3, 40), generator=g)
    kept, reset = model.new_state(), model.new_state()
    segments(model, x[:, :16], 8, kept)
    segments(model, x[:, :16], 8, reset)
    reset.reset(torch.tensor([1]))
    after_kept, after_reset = segments(model, x[:, 16:], 8, kept), segments(model, x[:, 16:], 8, reset)
    # Rows 0 and 2 never notice; row 1 continues as if its stream began at token 16.
    assert torch.equal(after_reset[[0, 2]], after_kept[[0, 2]])
    fresh = segments(model, x[1:2, 16:], 8, model.new_state())
    torch.testing.assert_close(after_reset[1:2], fresh, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(after_kept[1:2], fresh, atol=1e-3)
    # Once newer segments pushed the forgotten entries out, no mask is left.
    assert all(s.memory_padding is None for s in reset)


def test_reset_takes_a_mask_or_all_rows_and_checks_them():
    model = tiny(mem_len=8)
    st = model.new_state()
    model(torch.randint(0, 32, (2, 8)), state=st)
    st.reset(torch.tensor([False, False]))
    assert all(s.memory_padding is None for s in st) and st.offset == 8
    st.reset(torch.tensor([True, True]))
    assert st.memory_lengths == [0, 0] and st.offset == 0
    model(torch.randint(0, 32, (2, 8)), state=st)
    with pytest.raises(ValueError, match=r"rows \[5\] are outside a batch of 2"):
        st.reset(torch.tensor([5]))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        st.reset(torch.tensor([True, False, True]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reorder_matches_indexing_the_batch(seed):
    model = tiny(mem_len=12)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 32, (4, 24), generator=g)
    index = torch.randperm(4, generator=g)[torch.tensor([0, 1, 1, 3])]
    st = model.new_state()
    segments(model, x[:, :16], 8, st)
    st.reset(torch.tensor([index[0]]))  # a masked row moves with its memory
    st.reorder(index)
    ref = model.new_state()
    segments(model, x[:, :16], 8, ref)
    ref.reset(torch.tensor([index[0]]))
    xi = x[index]
    out = model(xi[:, 16:], state=st)
    ref.reorder(index)
    torch.testing.assert_close(out, model(xi[:, 16:], state=ref), atol=0, rtol=0)
    again = model.new_state()
    segments(model, xi[:, :16], 8, again)
    torch.testing.assert_close(out[1:], model(xi[1:, 16:], state=_rows(again, [1, 2, 3])), atol=1e-5, rtol=1e-5)


def _rows(state, rows):
    state.reorder(torch.tensor(rows))
    return state


@pytest.mark.parametrize("reset_row", [None, 0])
def test_state_dict_round_trip_is_bitwise(reset_row):
    model = tiny(mem_len=10)
    x = torch.randint(0, 32, (2, 24))
    st = model.new_state()
    segments(model, x[:, :16], 8, st)
    if reset_row is not None:
        st.reset(torch.tensor([reset_row]))
    saved = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in st.state_dict().items()}
    restored = model.new_state()
    restored.load_state_dict(saved)
    assert restored.offset == st.offset == 16
    assert torch.equal(model(x[:, 16:], state=restored), model(x[:, 16:], state=st))
    with pytest.raises(ValueError, match="mem_len=10"):
        model.new_state(mem_len=4).load_state_dict(saved)


# -- restrict: a segment that computes what feeding it token by token (with resets) computes ------

@pytest.mark.parametrize("kernel", ["sdpa", "reference"])
@pytest.mark.parametrize("mem_len, seed", [(4, 0), (6, 1), (16, 2)])
def test_restricted_segment_equals_feeding_it_token_by_token(kernel, mem_len, seed):
    """``restrict(n, starts, window=mem_len)``: query t sees its last mem_len tokens and none
    before its row's latest start, as when the n tokens are fed one at a time with
    ``reset(starts[:, t])`` before token t (the RL replay, ``rl/torso.py``)."""
    model = tiny(mem_len=mem_len, kernel={"name": kernel})
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 32, (3, 22), generator=g)
    starts = torch.rand(3, 12, generator=g) < 0.2
    starts[0] = False                                  # one row never restarts
    starts[1, 0] = True                                # one forgets its memory at once
    fed = model.new_state()
    segments(model, x[:, :10], 5, fed)                 # a carried memory to start from
    whole = model.new_state()
    whole.load_state_dict(fed.state_dict())
    steps = []
    for t in range(12):
        fed.reset(starts[:, t])
        steps.append(model(x[:, 10 + t: 11 + t], state=fed))
    whole.restrict(12, starts=starts, window=mem_len)
    out = model(x[:, 10:], state=whole)
    torch.testing.assert_close(out, torch.cat(steps, 1), atol=2e-5, rtol=2e-5)
    # the masks served that call only; without them the segment sees more and differs
    assert all(s.key_mask is None for s in whole)
    again = model.new_state()
    again.load_state_dict(fed.state_dict())
    assert not torch.allclose(model(x[:, 10:], state=again)[1], out[1], atol=1e-4)


def test_restricted_segment_gradients_stay_inside_window_and_episode():
    """Gradients flow through the segment's own keys, within what each query saw: output t
    depends on inputs t - window .. t of its own episode and on nothing else (one layer; a
    stack of L layers reaches L windows back, as it did when it acted)."""
    model = tiny(mem_len=3, depth={"n_layers": 1})
    st = model.new_state()
    model(torch.randint(0, 32, (2, 4)), state=st)
    st.restrict(9, starts=torch.tensor([[False] * 5 + [True] + [False] * 3, [False] * 9]), window=3)
    x = torch.randn(2, 9, 32, requires_grad=True)
    h = model.stack(x, state=st) @ torch.randn(32, generator=torch.Generator().manual_seed(0))
    for row, t, want in [(0, 7, {5, 6, 7}), (0, 4, {1, 2, 3, 4}), (1, 8, {5, 6, 7, 8}), (1, 2, {0, 1, 2})]:
        (grad,) = torch.autograd.grad(h[row, t], x, retain_graph=True)
        seen = {int(s) for s in grad[row].abs().sum(-1).nonzero().flatten()}
        assert seen == want, (row, t, seen)
        assert grad[1 - row].abs().sum() == 0


def test_restrict_checks_its_arguments():
    model = tiny(mem_len=4)
    st = model.new_state()
    with pytest.raises(ValueError, match="batch size"):
        st.restrict(3)
    model(torch.randint(0, 32, (2, 4)), state=st)
    with pytest.raises(ValueError, match=r"\(batch, 3\) bool"):
        st.restrict(3, starts=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="window must be"):
        st.restrict(3, window=-1)
    st.restrict(3, window=2)
    with pytest.raises(ValueError, match=r"key_mask has shape \(2, 3, 7\).*\(2, 5, 9\)"):
        model(torch.randint(0, 32, (2, 5)), state=st)
