"""T5's bucketed relative bias (Raffel et al. 2020): the buckets by hand, one table per stack,
causal decoding with a KV cache equal to recomputation, and the unscaled-score choice."""
from __future__ import annotations

import math

import pytest
import torch

from tfamily.build import build
from tfamily.models.generate import generate
from tfamily.nn.position.buckets import BucketedRelative, relative_buckets
from tfamily.spec import Spec


def _by_hand(rel: int, causal: bool, nb: int, md: int) -> int:
    """Mesh TensorFlow's rule, one distance at a time."""
    base = 0
    if causal:
        d = max(-rel, 0)
    else:
        nb //= 2
        base, d = (nb if rel > 0 else 0), abs(rel)
    exact = nb // 2
    if d < exact:
        return base + d
    return base + min(nb - 1, exact + int(math.log(d / exact) / math.log(md / exact) * (nb - exact)))


@pytest.mark.parametrize("causal,nb,md", [(False, 32, 128), (True, 32, 128), (False, 8, 12), (True, 6, 20)])
def test_buckets_equal_the_mesh_tensorflow_rule(causal, nb, md):
    rel = torch.arange(-300, 301)
    got = relative_buckets(rel, causal=causal, num_buckets=nb, max_distance=md)
    assert got.tolist() == [_by_hand(r, causal, nb, md) for r in rel.tolist()]
    assert got.min() >= 0 and got.max() == nb - 1  # every bucket in range, the last one reached


def test_bias_depends_on_the_distance_and_the_cache_offset():
    pos = BucketedRelative(4, causal=True, num_buckets=8, max_distance=16)
    q = torch.zeros(1, 4, 3, 2)
    _, _, bias = pos(q, q, q_offset=5, k_offset=5, m=8)  # queries at 5, 6, 7 after five cached keys
    want = pos.bias.weight[relative_buckets(torch.arange(8)[None] - torch.arange(5, 8)[:, None], causal=True,
                                            num_buckets=8, max_distance=16)]
    torch.testing.assert_close(bias[0], want.permute(2, 0, 1))


def test_bad_bucket_sizes_are_refused():
    with pytest.raises(ValueError, match="num_buckets must be an integer >= 4, got 2"):
        BucketedRelative(2, num_buckets=2)
    with pytest.raises(ValueError, match="max_distance must be an integer >= 9, got 8.*exceed the 8 exact"):
        BucketedRelative(2, num_buckets=32, max_distance=8)


def _spec(**kw) -> Spec:
    return Spec.from_dict(dict(dict(member="t5ish", model="decoder", vocab_size=40, d_model=16, dropout=0.0,
                                    position={"name": "t5_relative", "params": {"num_buckets": 8, "max_distance": 10}},
                                    heads={"n_heads": 4, "scale": 1.0}, depth={"n_layers": 3}), **kw))


def test_one_table_serves_every_layer_and_kv_cached_decoding_equals_recomputation():
    torch.manual_seed(0)
    model = build(_spec()).double().eval()
    blocks = model.stack.blocks
    assert all(b.attn.position is blocks[0].attn.position for b in blocks) and blocks[0].attn.position.causal
    assert sum("position" in k for k in dict(model.named_parameters())) == 1
    prompt = torch.randint(0, 40, (2, 3))
    out = generate(model, prompt, 14, greedy=True)  # 17 positions: past max_distance
    with torch.no_grad():
        full = model(out[:, :-1]).argmax(-1)[:, 2:]
    assert torch.equal(full, out[:, 3:])


def test_heads_scale_multiplies_the_scores():
    torch.manual_seed(1)
    plain = build(_spec(kernel={"name": "reference"})).eval()
    attn = plain.stack.blocks[0].attn
    x = torch.randn(1, 5, 16)
    with torch.no_grad():
        y1 = attn(x)
        attn.proj.qkv_proj.weight[:16] *= 2.0  # q doubled, scale halved: the same scores
        attn.proj.qkv_proj.bias[:16] *= 2.0
        attn.scale = 0.5
        torch.testing.assert_close(attn(x), y1)
    with pytest.raises(ValueError, match=r"heads.scale must be a finite number > 0 or null, got 0; T5 uses 1.0"):
        _spec(heads={"n_heads": 4, "scale": 0})
