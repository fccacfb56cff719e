"""AdamW groups, the warm-up + cosine schedule, and optimiser state without pickle."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from tfamily.train.optim import WarmupCosine, adamw, flatten_optimizer, unflatten_optimizer, warmup_cosine


def _model():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))


def test_only_matrices_decay():
    m = _model()
    opt = adamw(m, 1e-3, 0.1)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and all(p.dim() == 2 for p in decay["params"])
    assert no_decay["weight_decay"] == 0.0 and all(p.dim() == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(m.parameters()))


def test_warmup_then_cosine_to_the_floor():
    f = WarmupCosine(warmup=10, total=110, min_ratio=0.1)
    ramp = [f(s) for s in range(10)]
    assert ramp == sorted(ramp) and ramp[0] > 0 and ramp[-1] < 1
    assert f(10) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.1 + 0.9 * 0.5)  # half way down the cosine
    assert f(110) == pytest.approx(0.1) and f(500) == pytest.approx(0.1)
    decay = [f(s) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(decay, decay[1:]))


def test_scheduler_drives_the_optimiser_lr_and_its_state_is_json():
    opt = adamw(_model(), 2e-3, 0.0)
    sched = warmup_cosine(opt, 2, 10, 0.0)
    lrs = []
    for _ in range(12):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[2] == pytest.approx(2e-3) and lrs[-1] == pytest.approx(0.0, abs=1e-12)
    import json
    state = json.loads(json.dumps(sched.state_dict()))
    again = warmup_cosine(adamw(_model(), 2e-3, 0.0), 2, 999, 0.0)
    again.load_state_dict(state)
    assert again.lr_lambdas[0].total == 10 and again.last_epoch == sched.last_epoch


def test_optimizer_state_round_trips_through_safetensors_and_json(tmp_path):
    torch.manual_seed(0)
    m = _model()
    opt = adamw(m, 1e-2, 0.1, betas=(0.8, 0.9))
    x = torch.randn(16, 4)
    for _ in range(3):
        m(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    tensors, meta = flatten_optimizer(opt.state_dict())
    save_file(tensors, str(tmp_path / "opt.safetensors"))
    import json
    meta = json.loads(json.dumps(meta))
    m2 = _model()
    m2.load_state_dict(m.state_dict())
    opt2 = adamw(m2, 1.0, 0.0)
    opt2.load_state_dict(unflatten_optimizer(load_file(str(tmp_path / "opt.safetensors")), meta))
    assert opt2.param_groups[0]["betas"] == (0.8, 0.9) and opt2.param_groups[0]["lr"] == 1e-2
    for model, o in ((m, opt), (m2, opt2)):  # one more identical step on each
        model(x).square().mean().backward()
        o.step()
    for a, b in zip(m.parameters(), m2.parameters()):
        assert torch.equal(a, b)


# -- Muon on the hidden matrices, AdamW on the rest ------------------------------------------------
def _gpt():
    from tfamily import members
    from tfamily.build import build

    torch.manual_seed(0)
    return build(members.gpt(d_model=16, vocab_size=11, dropout=0.0, heads=dict(n_heads=2),
                             depth=dict(n_layers=2), position=dict(max_len=8)))


def _loss(m, seed):
    x = torch.randint(0, 11, (3, 8), generator=torch.Generator().manual_seed(seed))
    out = m(x)
    return (out[0] if isinstance(out, tuple) else out).square().mean()


def test_muon_takes_the_hidden_linear_matrices_only():
    from tfamily.train.optim import muon_params

    m = _gpt()
    chosen = muon_params(m)
    names = {n for n, p in m.named_parameters() if id(p) in chosen}
    linear = {f"{n}.weight" for n, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)
              and not n.startswith("head")}
    assert names == linear and names and all(m.get_parameter(n).dim() == 2 for n in names)
    assert not any(n.startswith(("embed", "head")) for n in names)


def test_muon_adamw_equals_its_two_optimisers_run_apart():
    """One step of the composite = torch's Muon on the hidden matrices + AdamW on the rest, with the
    same groups (weight decay on the other matrices only), lrs and hyper-parameters."""
    from tfamily.train.optim import MuonAdamW, muon_params, param_groups

    a, b = _gpt(), _gpt()
    opt = MuonAdamW(a, 3e-3, 0.1, betas=(0.9, 0.95), ns_dtype=torch.bfloat16)  # torch's Muon's dtype
    chosen = muon_params(b)
    muon = torch.optim.Muon([p for p in b.parameters() if id(p) in chosen], lr=3e-3, weight_decay=0.1,
                            adjust_lr_fn="match_rms_adamw")
    rest = [{**g, "params": [p for p in g["params"] if id(p) not in chosen]} for g in param_groups(b, 0.1)]
    adam = torch.optim.AdamW(rest, lr=3e-3, betas=(0.9, 0.95), fused=True)
    for seed in range(3):
        _loss(a, seed).backward()
        _loss(b, seed).backward()
        opt.step()
        muon.step()
        adam.step()
        opt.zero_grad()
        muon.zero_grad()
        adam.zero_grad()
    # Same-shape matrices go through Newton-Schulz as one bf16 batch here and one by one in torch's
    # Muon; a batched bf16 product may round one unit in the last place differently (2^-8 relative),
    # so Muon's matrices agree to lr x scale x 2^-8 per step (the batching itself is checked exactly
    # in fp32 below).
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        atol = 3 * 3e-3 * 0.2 * 8 * 2 ** -8 if id(q) in chosen else 1e-6
        torch.testing.assert_close(p, q, rtol=1e-5, atol=atol, msg=n)


def test_muon_batches_same_shape_matrices_as_it_would_take_them_one_by_one():
    """Muon's step with every hidden matrix in one group (same shapes batched) equals one Muon per
    matrix (nothing to batch), in fp32, over three steps with momentum and weight decay."""
    from tfamily.train.optim import Muon, muon_params

    a, b = _gpt(), _gpt()
    kw = dict(lr=3e-3, weight_decay=0.1, momentum=0.95, adjust_lr_fn="match_rms_adamw", ns_dtype=torch.float32)
    batched = Muon([p for p in a.parameters() if id(p) in muon_params(a)], **kw)
    chosen = [p for p in b.parameters() if id(p) in muon_params(b)]
    assert len({tuple(p.shape) for p in chosen}) < len(chosen)  # there is something to batch
    apart = [Muon([p], **kw) for p in chosen]
    for seed in range(3):
        _loss(a, seed).backward()
        _loss(b, seed).backward()
        batched.step()
        for o in apart:
            o.step()
        a.zero_grad()
        b.zero_grad()
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=n)


def test_muon_adamw_state_round_trips_and_the_schedule_reaches_both(tmp_path):
    from tfamily.train.optim import make_optimizer

    a = _gpt()
    opt = make_optimizer("muon", a, 4e-3, 0.1)
    sched = warmup_cosine(opt, 1, 10, 0.0)
    for seed in range(3):
        _loss(a, seed).backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    assert opt.muon.param_groups[0]["lr"] == opt.adamw.param_groups[0]["lr"] == sched.get_last_lr()[0] < 4e-3
    tensors, meta = flatten_optimizer(opt.state_dict())
    save_file(tensors, str(tmp_path / "opt.safetensors"))
    import json
    meta = json.loads(json.dumps(meta))
    b = _gpt()
    b.load_state_dict(a.state_dict())
    again = make_optimizer("muon", b, 1.0, 0.0)
    sched2 = warmup_cosine(again, 1, 10, 0.0)  # the trainer's order: build both, then load both
    again.load_state_dict(unflatten_optimizer(load_file(str(tmp_path / "opt.safetensors")), meta))
    sched2.load_state_dict(sched.state_dict())
    for m, o, sc in ((a, opt, sched), (b, again, sched2)):  # two more identical steps on each
        for seed in (9, 10):
            _loss(m, seed).backward()
            o.step()
            sc.step()
            o.zero_grad()
    assert again.muon.param_groups[0]["lr"] == again.adamw.param_groups[1]["lr"] == sched.get_last_lr()[0]
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="another train.optimizer"):
        make_optimizer("muon", b, 1.0, 0.0).load_state_dict(make_optimizer("adamw", b, 1.0, 0.0).state_dict())


def test_bad_optimizer_names_and_models_without_matrices_are_refused():
    from tfamily.train.optim import make_optimizer

    with pytest.raises(ValueError, match="train.optimizer='sgd'.*adamw, muon"):
        make_optimizer("sgd", _gpt(), 1e-3, 0.0)
    with pytest.raises(ValueError, match="use train.optimizer=adamw"):
        make_optimizer("muon", torch.nn.Sequential(torch.nn.LayerNorm(4)), 1e-3, 0.0)


def test_newton_schulz_in_fp32_orthogonalises():
    """The fp32 iteration (CPUs without native bf16) gives what the paper's iteration gives: singular
    values near 1 (its quintic leaves them within about 0.5-1.5), the singular vectors of G."""
    from tfamily.train.optim import newton_schulz

    g = torch.randn(24, 40, generator=torch.Generator().manual_seed(0))
    o = newton_schulz(g, (3.4445, -4.775, 2.0315), 5, 1e-7, torch.float32)
    s = torch.linalg.svdvals(o)
    assert o.dtype == torch.float32 and o.shape == g.shape and s.min() > 0.5 and s.max() < 1.5
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    m = u.T @ o @ vh.T  # O = U S' V^T: diagonal in G's singular bases
    assert (m - torch.diag(torch.diagonal(m))).abs().max() < 0.05 and torch.diagonal(m).min() > 0.5
    tall = newton_schulz(g.T, (3.4445, -4.775, 2.0315), 5, 1e-7, torch.float32)
    torch.testing.assert_close(tall, o.T)
