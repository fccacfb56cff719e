"""Al-Rfou et al. 2019 auxiliary losses: the total equals a hand computation over the layers,
the loop switches layer l off once progress passes l / (2n), and the classifiers never run
in evaluation or generation."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tfamily
from tfamily import members
from tfamily.models.generate import generate
from tfamily.objectives import AuxiliaryLosses
from tfamily.train import loop
from tfamily.train.config import load

V = 13


def _model(n_layers=3, **params):
    spec = members.gpt(d_model=32, dropout=0.0, vocab_size=V, depth__n_layers=n_layers, heads__n_heads=2,
                       ff__d_ff=64, position__max_len=64, objective={"name": "al_rfou", "params": params})
    return tfamily.build(spec)


def _by_hand(model, x, y, live, all_positions=True, second=True):
    """Run the stack layer by layer and add up the losses Al-Rfou et al. define."""
    n, obj = len(model.stack.blocks), model.objective
    h = model.position(model.embed(x), 0)
    outs = []
    for block in model.stack.blocks:
        h = block(h)
        outs.append(h)
    outs[-1] = model.stack.final_norm(outs[-1])
    logits = model.head(outs[-1])
    pos = slice(None) if all_positions else slice(-1, None)
    pos2 = slice(None) if all_positions else slice(-1, None)

    def ce(z, t):
        return F.cross_entropy(z.flatten(0, 1), t.flatten())

    total = ce(logits[:, pos], y[:, pos])
    for l in range(1, n + 1):
        if l not in live:
            continue
        if l < n:
            total = total + ce(obj.next_heads[l - 1](outs[l - 1])[:, pos], y[:, pos])
        if second:
            head = obj.second_heads[-1] if l == n else obj.second_heads[l - 1]
            total = total + 0.5 * ce(head(outs[l - 1][:, :-1])[:, pos2], y[:, 1:][:, pos2])
    return total


@pytest.mark.parametrize("seed, length", [(0, 8), (1, 17), (2, 40)])
def test_total_equals_the_hand_computation(seed, length):
    torch.manual_seed(seed)
    model = _model(4).train()
    x, y = torch.randint(0, V, (3, length)), torch.randint(0, V, (3, length))
    loss, m = model.loss({"x": x, "y": y})
    torch.testing.assert_close(loss, _by_hand(model, x, y, {1, 2, 3, 4}))
    model.set_progress(0.2)  # 0.2 > 1/8: layer 1 is off; 0.2 < 2/8: layer 2 is on
    loss, m = model.loss({"x": x, "y": y})
    torch.testing.assert_close(loss, _by_hand(model, x, y, {2, 3, 4}))
    assert m["aux/live_layers"] == 3 and "aux/layer1" not in m
    model.set_progress(0.9)
    torch.testing.assert_close(model.loss({"x": x, "y": y})[0], _by_hand(model, x, y, {4}))
    model.set_progress(0.1)  # a moved estimate of the end never brings a cut layer back
    assert model.objective.live_layers() == [4]


@pytest.mark.parametrize("seed", [0, 1])
def test_ablations_equal_their_hand_computation(seed):
    torch.manual_seed(seed)
    x, y = torch.randint(0, V, (2, 11)), torch.randint(0, V, (2, 11))
    ends = _model(3, all_positions=False)
    torch.testing.assert_close(ends.loss({"x": x, "y": y})[0], _by_hand(ends, x, y, {1, 2, 3}, all_positions=False))
    one = _model(3, multiple_targets=False)
    assert len(one.objective.second_heads) == 0
    torch.testing.assert_close(one.loss({"x": x, "y": y})[0], _by_hand(one, x, y, {1, 2, 3}, second=False))
    top = _model(3, intermediate=False)
    assert len(top.objective.next_heads) == 0 and len(top.objective.second_heads) == 1
    torch.testing.assert_close(top.loss({"x": x, "y": y})[0], _by_hand(top, x, y, {3}))


def test_gradients_reach_only_the_live_heads():
    model = _model(4)
    model.set_progress(0.3)  # layers 1 and 2 cut (1/8, 2/8 < 0.3 <= 3/8)
    x = torch.randint(0, V, (2, 9))
    model.loss({"x": x, "y": x.roll(-1, 1)})[0].backward()
    heads = model.objective
    assert all(p.grad is None for h in (heads.next_heads[0], heads.next_heads[1], heads.second_heads[0],
                                        heads.second_heads[1]) for p in h.parameters())
    assert all(p.grad is not None for h in (heads.next_heads[2], heads.second_heads[2], heads.second_heads[3])
               for p in h.parameters())


def test_the_loop_switches_each_layer_off_at_its_step(tmp_path):
    n, steps = 4, 16
    cfg = load(None, {"member": "gpt", "model.d_model": 32, "model.heads.n_heads": 2, "model.depth.n_layers": n,
                      "model.position.max_len": 32, "model.dropout": 0.0, "model.objective.name": "al_rfou",
                      "data.seq_len": 16, "train.batch_size": 2, "train.max_steps": steps, "train.warmup": 1,
                      "train.eval_every": None, "train.eval_tokens": 64, "train.ckpt_every": None,
                      "train.precision": "fp32", "train.progress": False, "train.tensorboard": False,
                      "train.out": str(tmp_path / "run")})
    trainer = loop.Trainer(cfg)
    obj = trainer.model.objective
    live, weights = [], []

    def record(module, args, out):
        if module.training:
            live.append(module.live_layers())
            weights.append([h[1].weight.detach().clone() for h in obj.next_heads])
    obj.register_forward_hook(record)
    trainer.fit()
    assert len(live) == steps
    for l in range(1, n):
        on = [s for s in range(steps) if l in live[s]]
        assert on == list(range(2 * l)), (l, on)  # progress s / 16 < l / 8  <=>  s < 2 l
        # A cut head is never updated again (no gradient: AdamW skips it, decay included).
        assert all(torch.equal(weights[s][l - 1], weights[2 * l][l - 1]) for s in range(2 * l, steps))
        assert not torch.equal(weights[0][l - 1], weights[2 * l][l - 1])
    assert all(n in s for s in live)  # the last layer is never cut


def test_heads_never_run_in_evaluation_or_generation():
    model = _model(3)
    calls = []
    for head in [*model.objective.next_heads, *model.objective.second_heads]:
        head.register_forward_hook(lambda *a: calls.append(1))
    x = torch.randint(0, V, (2, 10))
    model.loss({"x": x, "y": x})
    assert calls  # training runs them
    calls.clear()
    model.eval()
    loss, _ = model.loss({"x": x, "y": x})
    torch.testing.assert_close(loss, F.cross_entropy(model(x).flatten(0, 1), x.flatten()))
    generate(model, x[:, :3], 5, greedy=True)
    assert not calls


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="objective 'al_rfou' with depth 'universal'"):
        members.gpt(depth={"name": "universal"}, objective={"name": "al_rfou"})
    with pytest.raises(TypeError, match="intermediate must be true or false"):
        AuxiliaryLosses(V, 8, 2, intermediate="yes")
    with pytest.raises(ValueError, match="second_weight"):
        AuxiliaryLosses(V, 8, 2, second_weight=-1.0)
    with pytest.raises(ValueError, match="progress"):
        AuxiliaryLosses(V, 8, 2).set_progress(float("nan"))
    with pytest.raises(ValueError, match="does not fit model 'encoder'"):
        members.bert(objective={"name": "al_rfou"})
