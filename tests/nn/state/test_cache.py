"""KVCache: growing by doubling keeps every appended key and value; static
(cross-attention) entries; beam reordering; per-layer state, with what other parts carry
(a causal convolution's last inputs) reordered, saved, restored and reset alike."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.state import KVCache, LayerState, new_state, reorder_state


def test_append_returns_everything_so_far_across_regrowth():
    cache = KVCache()
    ks, vs = [], []
    for t in [1, 3, 20, 1, 40]:  # crosses the initial capacity and several doublings
        k, v = torch.randn(2, 3, t, 4), torch.randn(2, 3, t, 4)
        ks.append(k)
        vs.append(v)
        all_k, all_v = cache.append(k, v)
        assert torch.equal(all_k, torch.cat(ks, 2)) and torch.equal(all_v, torch.cat(vs, 2))
    assert cache.length == 65
    assert torch.equal(cache.kv[0], torch.cat(ks, 2))


def test_set_is_static_and_kv_is_none_when_empty():
    cache = KVCache()
    assert cache.kv is None
    k, v = torch.randn(1, 2, 5, 3), torch.randn(1, 2, 5, 3)
    cache.set(k, v)
    assert cache.length == 5 and torch.equal(cache.kv[0], k) and torch.equal(cache.kv[1], v)


def test_reorder_selects_batch_rows():
    cache = KVCache()
    k = torch.arange(3.0).view(3, 1, 1, 1).expand(3, 1, 2, 1).contiguous()
    cache.append(k, -k)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.kv[0][:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]
    assert cache.kv[1][:, 0, 0, 0].tolist() == [-2.0, -2.0, 0.0]
    # Appending after a reorder keeps the reordered prefix.
    all_k, _ = cache.append(torch.zeros(3, 1, 1, 1), torch.zeros(3, 1, 1, 1))
    assert all_k[:, 0, :, 0].tolist() == [[2.0, 2.0, 0.0], [2.0, 2.0, 0.0], [0.0, 0.0, 0.0]]


def test_new_state_and_reorder_state():
    state = new_state(3, cross=True)
    assert len(state) == 3 and all(isinstance(s, LayerState) for s in state)
    assert state[0].cache is not state[1].cache and state[0].cross_cache is not None
    assert new_state(2, cache=False)[0].cache is None
    state[0].memory = torch.arange(4.0).view(4, 1, 1)
    state[1].cache.append(torch.arange(4.0).view(4, 1, 1, 1), torch.zeros(4, 1, 1, 1))
    reorder_state(state, torch.tensor([3, 0, 0, 1]))
    assert state[0].memory.flatten().tolist() == [3.0, 0.0, 0.0, 1.0]
    assert state[1].cache.kv[0].flatten().tolist() == [3.0, 0.0, 0.0, 1.0]


def test_cache_state_follows_the_state_protocol():
    from tfamily.nn.state import CacheState, State
    st = new_state(2)
    assert isinstance(st, CacheState) and isinstance(st, State) and not st.carried
    assert st.offset == 0
    st[0].cache.append(torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4))
    st.advance(7)
    assert st.offset == 7


def test_a_new_kind_of_state_needs_no_change_in_the_model():
    # The model asks a state only for `offset` and `advance(n)`: a state that keeps no
    # cache but counts tokens makes a learned-position model see positions 5.. and
    # is told how many tokens each call consumed.
    from tfamily import build, members

    class Counting(list):
        carried = False

        def __init__(self, n_layers, start):
            super().__init__(LayerState() for _ in range(n_layers))
            self.offset, self.calls = start, []

        def advance(self, n):
            self.calls.append(n)
            self.offset += n

    torch.manual_seed(0)
    model = build(members.gpt(d_model=16, heads__n_heads=2, depth__n_layers=1, position__max_len=32)).eval()
    x = torch.randint(0, 256, (1, 4))
    st = Counting(1, 5)
    out = model(x, state=st)
    torch.testing.assert_close(out, model(x, offset=5))
    assert st.calls == [4] and st.offset == 9
    assert not torch.allclose(out, model(x, offset=0))


def _gpt():
    from tfamily import build, members
    torch.manual_seed(0)
    return build(members.gpt(d_model=16, heads__n_heads=2, depth__n_layers=2, position__max_len=32)).eval()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cache_state_reorder_matches_indexing(seed):
    model = _gpt()
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (3, 9), generator=g)
    index = torch.tensor([2, 0, 0])
    st = model.new_state()
    model(x[:, :8], state=st)
    st.reorder(index)
    torch.testing.assert_close(model(x[index, 8:], state=st), model(x[index])[:, 8:], atol=1e-5, rtol=1e-5)


def test_cache_state_dict_round_trip_and_reset():
    model = _gpt()
    x = torch.randint(0, 256, (2, 9))
    st = model.new_state()
    model(x[:, :8], state=st)
    restored = model.new_state()
    restored.load_state_dict(st.state_dict())
    assert restored.offset == 8
    assert torch.equal(model(x[:, 8:], state=restored), model(x[:, 8:], state=st))
    with pytest.raises(ValueError, match=r"cannot forget some rows \(\[1\] of 2\)"):
        st.reset(torch.tensor([1]))
    st.reset()
    assert st.offset == 0
    torch.testing.assert_close(model(x[:, :3], state=st), model(x[:, :3]), atol=1e-5, rtol=1e-5)


def _sepconv_gpt():
    # A causal separable-convolution transition carries its last inputs in LayerState.parts.
    from tfamily import build, members
    torch.manual_seed(0)
    return build(members.gpt(d_model=16, heads__n_heads=2, depth__n_layers=2, position__max_len=32,
                             ff__name="sepconv", ff__params={"kernel_size": 3})).double().eval()


@pytest.mark.parametrize("seed", [0, 1])
@torch.no_grad()
def test_conv_carries_follow_reorder(seed):
    model = _sepconv_gpt()
    x = torch.randint(0, 256, (3, 9), generator=torch.Generator().manual_seed(seed))
    index = torch.tensor([2, 0, 0])
    st = model.new_state()
    for i in range(7):
        model(x[:, i:i + 1], state=st)
    assert st[0].parts["ff.inner"].shape == (3, 2, 16)
    st.reorder(index)
    assert st[1].parts["ff.outer"].shape == (3, 2, 64)
    torch.testing.assert_close(model(x[index, 7:], state=st), model(x[index])[:, 7:], atol=1e-10, rtol=1e-10)


@torch.no_grad()
def test_conv_carries_survive_state_dict_round_trip_and_reset():
    model = _sepconv_gpt()
    x = torch.randint(0, 256, (2, 7))
    st = model.new_state()
    for i in range(3):
        model(x[:, i:i + 1], state=st)
    saved = st.state_dict()
    assert {f"part.{i}.ff.{c}" for i in (0, 1) for c in ("inner", "outer")} <= set(saved)
    restored = model.new_state()
    restored.load_state_dict(saved)
    ahead = [model(x[:, i:i + 1], state=st) for i in range(3, 7)]
    for i, out in zip(range(3, 7), ahead):
        assert torch.equal(model(x[:, i:i + 1], state=restored), out)
    torch.testing.assert_close(torch.cat(ahead, 1), model(x)[:, 3:], atol=1e-10, rtol=1e-10)
    st.reset()
    assert all(not s.parts for s in st)
    torch.testing.assert_close(model(x[:, :3], state=st), model(x[:, :3]), atol=1e-10, rtol=1e-10)
