"""Memory torsos: a row reset at an episode end makes that row's outputs equal a fresh
start while the other rows are untouched; states copy and restore exactly."""
from __future__ import annotations

import pytest
import torch

from tfamily import members
from tfamily.rl.torso import build_torso, clone_state

TORSOS = [m for m in ("transformer_xl", "gtrxl", "trxl_i") if m in members.REGISTRY] + ["lstm", "gru"]


def _small(member):
    torch.manual_seed(0)
    return build_torso(member, d_model=16, n_layers=2, n_heads=2, mem_len=6).eval()


@pytest.mark.parametrize("member", TORSOS)
@pytest.mark.parametrize("seed, before, after", [(0, 3, 4), (1, 9, 2), (2, 1, 8)])
@torch.no_grad()
def test_row_reset_is_a_fresh_start_for_that_row_only(member, seed, before, after):
    torso = _small(member)
    g = torch.Generator().manual_seed(seed)
    b, d = 3, torso.d_model
    xs = torch.randn(before + after, b, d, generator=g)
    state = torso.new_state()
    for t in range(before):
        torso(xs[t], state)
    kept = clone_state(torso, state)
    state.reset(torch.tensor([1]))
    outs = torch.stack([torso(xs[t], state) for t in range(before, before + after)])
    fresh = torso.new_state()  # row 1 from nothing
    want1 = torch.stack([torso(xs[t, 1:2], fresh) for t in range(before, before + after)])[:, 0]
    torch.testing.assert_close(outs[:, 1], want1, rtol=1e-5, atol=1e-5)
    others = torch.stack([torso(xs[t], kept) for t in range(before, before + after)])  # never reset
    assert torch.equal(outs[:, [0, 2]], others[:, [0, 2]])
    assert not torch.allclose(outs[:, 1], others[:, 1], atol=1e-4)  # the memory mattered


@pytest.mark.parametrize("member", TORSOS)
@torch.no_grad()
def test_state_round_trips_and_reorders(member):
    torso = _small(member)
    x = torch.randn(5, 4, torso.d_model)
    state = torso.new_state()
    for t in range(3):
        torso(x[t], state)
    copy = clone_state(torso, state)
    assert torch.equal(torso(x[3], state), torso(x[3], copy))
    sub = clone_state(torso, state)
    sub.reorder(torch.tensor([2, 0]))
    # a batch of 2 rows may round differently from one of 4 (another matmul blocking)
    torch.testing.assert_close(torso(x[4, [2, 0]], sub), torso(x[4], state)[[2, 0]], rtol=1e-6, atol=1e-6)


def test_torso_refuses_a_member_without_memory():
    with pytest.raises(ValueError, match="no memory across steps.*lstm"):
        build_torso("gpt")
    with pytest.raises(ValueError, match="unknown member"):
        build_torso("nope")
    with pytest.raises(ValueError, match="pattern 'adaptive_span'"):
        build_torso("adaptive_span")
    with pytest.raises(ValueError, match="mem_len must be an integer >= 1, got 0; a memory torso"):
        build_torso("transformer_xl", mem_len=0)
