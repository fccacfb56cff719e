"""Member variants: a member's bidirectional encoder keeps its sparse pattern and drops causality."""
from __future__ import annotations

import pytest
import torch

from tfamily import members
from tfamily.build import build, pattern
from tfamily.nn.patterns import density
from tfamily.spec import Spec
from tfamily.spec.variants import two_sided

N = 64


def _encoder(member: str, **kw):
    spec = members.get(member)(model="classifier", objective={"name": "classification", "params": {"n_classes": 3}},
                               d_model=16, depth__n_layers=2, heads__n_heads=2, vocab_size=12, dropout=0.0, **kw)
    d = spec.to_dict()
    d["pattern"] = two_sided(d["pattern"], N)
    return Spec.from_dict(d)


SPARSE = {"longformer": {"pattern": {"params": {"window": 16},
                                     "per_layer": [{"name": "longformer", "params": {"window": 8, "n_global": 1}},
                                                   {"name": "longformer", "params": {"window": 16, "n_global": 1}}]}},
          "bigbird": {"pattern": {"params": {"block": 4}}},
          "sparse_transformer_strided": {"pattern": {"params": {"stride": 8}}},
          "sparse_transformer_fixed": {"pattern": {"params": {"block": 8, "summary": 2}}}}


@pytest.mark.parametrize("member", list(SPARSE))
def test_a_two_sided_member_sees_later_tokens_and_stays_sparse(member):
    spec = _encoder(member, **SPARSE[member])
    for i in range(spec.depth.n_layers):
        p = pattern(spec, i)
        assert not p.causal and density(p, N, n_heads=2) < 1.0
    torch.manual_seed(0)
    model = build(spec).eval()
    x = torch.randint(1, 12, (1, N))
    later = x.clone()
    later[0, N - 5] = x[0, N - 5] % 11 + 1
    h = [model.stack(model.position(model.embed(t), 0)) for t in (x, later)]
    assert not torch.allclose(h[0][0, 3], h[1][0, 3]), "position 3 should depend on a later token"


def test_the_reformers_encoder_hashes_both_ways():
    torch.manual_seed(0)
    spec = _encoder("reformer", kernel={"params": {"bucket_size": 8}})
    assert spec.pattern.name == "full" and spec.kernel.name == "lsh"
    model = build(spec).eval()
    x = torch.randint(1, 12, (1, N))
    later = x.clone()
    later[0, N - 1] = x[0, N - 1] % 11 + 1
    h = [model.stack(model.position(model.embed(t), 0)) for t in (x, later)]
    assert not torch.allclose(h[0][0, :N - 1], h[1][0, :N - 1])


def test_padding_never_changes_a_two_sided_members_logits():
    torch.manual_seed(0)
    model = build(_encoder("bigbird", **SPARSE["bigbird"])).eval()
    assert model.sees_ahead
    x = torch.randint(1, 12, (2, N))
    real = torch.ones(2, N, dtype=torch.bool)
    real[0, 40:] = False
    other = x.clone()
    other[0, 40:] = torch.randint(1, 12, (N - 40,))
    assert torch.allclose(model(x, key_padding=real), model(other, key_padding=real), atol=1e-5)


def test_the_rule_pattern_by_pattern():
    assert two_sided({"name": "causal"}, N) == {"name": "full", "params": {}}
    lf = two_sided({"name": "longformer", "params": {"window": 16}}, N)
    assert lf["params"] == {"window": 9, "causal": False}  # Beltagy et al.: w / 2 on each side
    bb = two_sided({"name": "bigbird", "params": {"block": 4}}, 30)
    assert bb["params"] == {"block": 4, "causal": False, "n_blocks": 8}
    u = two_sided({"name": "union", "params": {"patterns": [{"name": "causal"}, {"name": "global_tokens"}]}}, N)
    assert u["params"]["patterns"] == [{"name": "full", "params": {}},
                                       {"name": "global_tokens", "params": {"causal": False}}]
    with pytest.raises(ValueError, match="pattern 'local_1d' has no two-sided form"):
        two_sided({"name": "local_1d", "params": {"block": 8}}, N)
