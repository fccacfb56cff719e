"""Members differ from their base only where their papers do, and each member's dense twin (its
attention axes set back to the base's through the same ``model.*`` overrides a user gives) is the base
with the member's other listed changes: the same spec, the same weights from the same seed, bitwise the
same loss at step 0 and after 50 steps. Where a member's only changes are its attention, the twin is
the base member itself (BigBird: ``gpt``)."""
from __future__ import annotations

import json

import pytest
import torch

from tfamily import build, members
from tfamily.members import recipes
from tfamily.nn.patterns import Causal, Full
from tfamily.spec import Spec, merge
from tfamily.train import config, presets, resolve

TRANSFORMERS = [n for n, m in members.REGISTRY.items() if m.base is not None]
WITH_ATTENTION = [n for n in TRANSFORMERS if any(c.attention for c in members.REGISTRY[n].changes)]
TINY = {"d_model": 32, "heads": {"n_heads": 2, "d_head": None}, "depth": {"n_layers": 2},
        "position": {"max_len": 64}, "ff": {"d_ff": None}}
SEQ, VOCAB = 64, 256
BASE_MEMBER = {"decoder": "gpt", "encoder": "bert", "encoder_decoder": "vanilla"}


def _dotted(d: dict, prefix: str = "model.") -> list[str]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "params":
            out += _dotted(v, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}={json.dumps(v)}")
    return out


def _user_spec(name: str, extra: dict) -> Spec:
    """The spec `tfamily train --member NAME model.k=v ...` builds (size small, context 64)."""
    cfg = config.load(overrides=[f"member={name}", "size=small", *_dotted(TINY), *_dotted(extra)])
    return resolve.make_spec(cfg, VOCAB, SEQ)[0]


def _expected(name: str, d: dict) -> Spec:
    sized = presets.member_dict(name, "small", {"member": name, "paper": members.REGISTRY[name].paper, **d})
    sized["pattern"] = d["pattern"]  # the size preset's windows belong to the member's own pattern
    return Spec.from_dict({**merge(sized, TINY), "vocab_size": VOCAB})


def _train(spec: Spec, steps: int = 50) -> list[float]:
    torch.manual_seed(0)
    model = build(spec)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps + 1):
        x = torch.randint(0, VOCAB, (4, SEQ + 1), generator=g)
        loss, _ = model.loss({"x": x[:, :-1], "y": x[:, 1:]})
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [losses[0], losses[-1]]


def _body(spec: Spec) -> dict:
    return {k: v for k, v in spec.to_dict().items() if k not in ("member", "paper")}


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_member_differs_from_its_base_only_in_its_declared_changes(name):
    m = members.REGISTRY[name]
    assert m.base in recipes.BASES
    declared = {c.key.split(".")[0] for c in m.changes} | {c.key for c in m.changes}
    at_sizes = Spec.from_dict({"member": "base", **merge(recipes.base(m.base), m.sizes)})
    spec = m.make()
    for key, *_ in members.diff_specs(spec, at_sizes):
        assert key in declared or key.split(".")[0] in declared or any(c.startswith(key + ".") for c in declared), \
            f"{name} differs from the {m.base} base in {key}, which it does not declare"
    for c in m.changes:
        assert len(c.source) > 20 and ("section" in c.source or "appendix" in c.source or "not " in c.source), c


@pytest.mark.parametrize("name", WITH_ATTENTION)
def test_dense_twin_is_the_base_with_the_other_changes(name):
    m = members.REGISTRY[name]
    twin = _user_spec(name, m.dense())
    want = "full" if m.base == "encoder" else "causal"
    for layer in range(twin.depth.n_layers):
        assert isinstance(resolve.pattern(twin, layer), Full if want == "full" else Causal), (name, layer)
    assert twin.kernel.name == "sdpa" and not twin.heads.shared_qk and twin.depth.name != "reversible"
    expected = _expected(name, m.twin())
    assert _body(twin) == _body(expected)
    assert _train(twin) == _train(expected)


def test_a_twin_with_no_changes_left_is_the_base_member():
    no_changes_left = [n for n in WITH_ATTENTION if not any(not c.attention for c in members.REGISTRY[n].changes)]
    assert no_changes_left == ["bigbird"]
    twin = _user_spec("bigbird", members.REGISTRY["bigbird"].dense())
    base = _user_spec("gpt", {})
    assert _body(twin) == _body(base)


def test_another_pattern_name_drops_the_members_params_and_per_layer():
    spec = _user_spec("longformer", {"pattern": {"name": "causal"}})
    assert spec.pattern.name == "causal" and spec.pattern.params == {} and spec.pattern.per_layer == ()
    spec = _user_spec("bigbird", {"pattern": {"name": "causal", "params": {}}})
    assert spec.pattern.name == "causal"
    spec = _user_spec("reformer", {"kernel": {"name": "sdpa"}})
    assert spec.kernel.params == {}
    # params given beside the new name are kept
    spec = _user_spec("bigbird", {"pattern": {"name": "sliding_window", "params": {"window": 4}}})
    assert spec.pattern.params == {"window": 4}
    assert members.longformer(pattern__name="causal").pattern.per_layer == ()


def test_a_members_own_per_layer_list_follows_the_depth_to_its_largest():
    spec = members.longformer(depth__n_layers=2)
    assert [p.params["window"] for p in spec.pattern.per_layer] == [32, 512]
    cfg = config.load(overrides=["member=longformer", "size=small", "model.depth.n_layers=2"])
    spec, note = resolve.make_spec(cfg, VOCAB, 1024)
    assert [p.params["window"] for p in spec.pattern.per_layer] == [32, 256]
    assert "resampled" in note and "model.pattern.per_layer" in note


def test_a_user_per_layer_list_longer_than_the_depth_is_refused():
    layers = [{"name": "sliding_window", "params": {"window": 4}}] * 3
    with pytest.raises(ValueError, match="pattern.per_layer has 3 entries for depth.n_layers=2"):
        _user_spec("gpt", {"pattern": {"per_layer": layers}})


def test_members_diff_names_the_fields_and_their_sources(capsys):
    from tfamily import cli
    assert cli.main(["members", "gpt", "--diff", "longformer"]) == 0
    out = capsys.readouterr().out
    assert "position.name" in out and "relative" in out and "appendix B" in out
    assert "init" not in out.split("\n", 1)[1]  # both take the decoder base's init
    assert cli.main(["members", "gpt", "--diff", "gpt"]) == 0
    assert "differ in 0 spec fields" in capsys.readouterr().out


@pytest.mark.parametrize("name", WITH_ATTENTION)
def test_attention_only_is_the_base_with_the_members_attention(name):
    """What the arena trains by default: the member's attention changes on the base recipe."""
    m = members.REGISTRY[name]
    spec = _user_spec(name, m.attention_only())
    own = [c for c in m.changes if c.attention]
    want = members.compose(m.base, m.sizes, tuple(own))
    for axis in ("pattern", "kernel"):  # the member's context rule scales its own pattern at 64
        want[axis] = spec.to_dict()[axis]
    assert _body(spec) == _body(_expected(name, want))
    assert spec.pattern.name == m.make().pattern.name and spec.kernel.name == m.make().kernel.name
