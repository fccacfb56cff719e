"""The ``gpt`` member learns exactly as the flat reference written to nanoGPT's definition
(tfamily/bench/flat_gpt.py): same loss at step 0, same weights after 50 steps of the same
optimiser, schedule and clipping on the same batches; its dropout sits where GPT-2's does;
its initialisation has GPT-2's scale tensor by tensor. And ``tfamily bench recipe`` runs."""
from __future__ import annotations

import json
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tfamily
from tfamily import members
from tfamily.bench import flat_gpt
from tfamily.train.optim import WarmupCosine, param_groups

VOCAB, D, LAYERS, HEADS, SEQ, BATCH = 65, 64, 2, 4, 32, 4


def _pair(bias: bool, approximate: str, seed: int):
    torch.manual_seed(seed)
    activation = {"tanh": "gelu_tanh", "none": "gelu"}[approximate]
    model = tfamily.build(members.gpt(d_model=D, vocab_size=VOCAB, dropout=0.0, bias=bias,
                                      heads=dict(n_heads=HEADS), depth=dict(n_layers=LAYERS),
                                      position=dict(max_len=SEQ), ff=dict(activation=activation)))
    ref = flat_gpt.ReferenceGPT(VOCAB, D, LAYERS, HEADS, HEADS, SEQ, bias=bias, approximate=approximate)
    return model, ref.copy_from(model)


def _optimiser(model: nn.Module):
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99), foreach=False)
    return opt, WarmupCosine(10, 50, 0.1)


def _step(model, opt, schedule, i, loss_fn) -> float:
    for g in opt.param_groups:
        g["lr"] = 1e-3 * schedule(i)
    loss = loss_fn()
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


@pytest.mark.parametrize("bias,approximate", [(False, "none"), (True, "tanh")], ids=["nanogpt", "gpt2"])
def test_member_trains_exactly_as_the_flat_reference(bias, approximate):
    model, ref = _pair(bias, approximate, seed=7)
    g = torch.Generator().manual_seed(3)
    batches = [torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g) for _ in range(50)]
    model_opt, schedule = _optimiser(model)
    ref_opt, _ = _optimiser(ref)
    for i, b in enumerate(batches):
        x, y = b[:, :-1], b[:, 1:]
        ours = _step(model, model_opt, schedule, i, lambda: model.loss({"x": x, "y": y})[0])
        theirs = _step(ref, ref_opt, schedule, i,
                       lambda: F.cross_entropy(ref(x).flatten(0, 1), y.flatten()))
        if i == 0:
            assert abs(ours - theirs) <= 1e-6, (ours, theirs)
            assert abs(ours - math.log(VOCAB)) < 0.1  # GPT-2's init starts near ln V
    named = dict(model.named_parameters())
    mapped = ref.composed_names()
    assert set(named) == set(mapped), set(named) ^ set(mapped)
    for name, p in named.items():
        ours_p, theirs_p = p, mapped[name]
        if name.endswith("qkv_proj.bias"):
            # The key bias adds q . b_k to every score of a row, which softmax ignores: its
            # gradient is zero up to rounding, and Adam scales that rounding noise up to full
            # steps, differently for any two summation orders. Compare the q and v rows.
            keep = torch.ones_like(p, dtype=torch.bool)
            keep[D:2 * D] = False
            ours_p, theirs_p = p[keep], theirs_p[keep]
        rel = (ours_p - theirs_p).norm() / theirs_p.norm().clamp_min(1e-12)
        assert rel <= 1e-5, f"{name}: relative difference {rel:.2e} after 50 steps"
    assert not torch.allclose(named["embed.weight"], _pair(bias, approximate, seed=7)[0].embed.weight)


def test_the_comparison_sees_a_different_recipe():
    """Not vacuous: the member with the original Transformer's input scale drifts from the
    reference within a few steps."""
    model, ref = _pair(False, "none", seed=7)
    model.embed.scale = math.sqrt(D)
    x = torch.randint(0, VOCAB, (BATCH, SEQ))
    assert not torch.allclose(model(x), ref(x), atol=1e-3)


def test_dropout_sits_where_gpt2_puts_it():
    """Embedding sum, attention probabilities and sublayer outputs; not the MLP's hidden
    activations (Hugging Face's embd_pdrop, attn_pdrop, resid_pdrop)."""
    model = tfamily.build(members.gpt(d_model=D, vocab_size=VOCAB, dropout=0.1, depth=dict(n_layers=LAYERS),
                                      heads=dict(n_heads=HEADS), position=dict(max_len=SEQ)))
    assert isinstance(model.drop, nn.Dropout) and model.drop.p == 0.1
    for blk in model.stack.blocks:
        assert blk.attn.dropout == 0.1
        assert blk.attn_residual.drop.p == 0.1 and blk.ff_residual.drop.p == 0.1
        assert not any(isinstance(m, nn.Dropout) for m in blk.ff.modules())
    off = tfamily.build(members.gpt(d_model=D, vocab_size=VOCAB, dropout=0.0, depth=dict(n_layers=1),
                                    heads=dict(n_heads=HEADS), position=dict(max_len=SEQ)))
    assert not any(isinstance(m, nn.Dropout) for m in off.modules()) and off.stack.blocks[0].attn.dropout == 0.0


def test_vanilla_keeps_the_transformer_papers_input_scale():
    spec = members.vanilla()
    assert spec.scale_embeddings and spec.init.name == "torch"
    spec = members.gpt()
    assert not spec.scale_embeddings and not spec.logit_scale and spec.init.name == "normal"


def test_initialisation_has_gpt2s_scale_at_d768():
    """Each initialised tensor's std within 3% of GPT-2's (0.02; 0.02 / sqrt(2 L) for the
    projections that write into the residual stream), biases zero, norms at identity."""
    torch.manual_seed(0)
    spec = members.gpt(vocab_size=256, depth=dict(n_layers=12))
    model = tfamily.build(spec)
    residual = 0.02 / math.sqrt(2 * 12)
    checked = 0
    for name, p in model.named_parameters():
        if re.search(r"norm\.weight$", name):
            assert torch.all(p == 1), name
        elif name.endswith("bias"):
            assert torch.all(p == 0), name
        else:
            want = residual if re.search(r"(attn\.out_proj|ff\.net\.3)\.weight$", name) else 0.02
            assert abs(p.std().item() / want - 1) < 0.03, f"{name}: std {p.std().item():.5f}, want {want:.5f}"
            assert abs(p.mean().item()) < 0.1 * want, name
            checked += 1
    assert checked == 2 + 4 * 12  # token and position tables, four matrices per block


def test_bench_recipe_runs_all_three_on_identical_batches(tmp_path, capsys):
    pytest.importorskip("transformers")
    from tfamily.cli import main
    text = tmp_path / "tiny.txt"
    text.write_text("to be or not to be, that is the question.\n" * 60)
    out = tmp_path / "out"
    assert main(["bench", "recipe", "--corpus", str(text), "--d-model", "32", "--layers", "1", "--heads", "2",
                 "--seq-len", "16", "--batch", "4", "--steps", "6", "--eval-every", "3", "--seeds", "0", "1",
                 "--warmup", "2", "--out", str(out)]) == 0
    rows = json.loads((out / "recipe.json").read_text())
    assert {r["model"] for r in rows} == {"tfamily", "nanogpt", "hf-gpt2"}
    assert len(rows) == 3 * 2 * 3 and all(math.isfinite(r["val_loss"]) for r in rows)  # steps 0, 3, 6
    summary = json.loads((out / "recipe_summary.json").read_text())
    assert [s["model"] for s in summary] == ["tfamily", "nanogpt", "hf-gpt2"]
    assert (out / "recipe.png").stat().st_size > 0
    assert "val@steps" in capsys.readouterr().out


def test_bench_recipe_can_give_the_member_the_flat_peers_choices(tmp_path):
    """--member-choices nanogpt: the member without biases and with exact GELU, as the flat peer: the
    same parameter shapes, and a run of both."""
    import argparse

    from tfamily.bench.recipe import build_model
    from tfamily.cli import main
    args = argparse.Namespace(d_model=32, layers=2, heads=2, seq_len=16, dropout=0.0, member_choices="nanogpt")
    member, flat = build_model("tfamily", 11, args), build_model("nanogpt", 11, args)
    assert sorted(p.shape for p in member.parameters()) == sorted(p.shape for p in flat.parameters())
    assert not any(n.endswith("bias") for n, _ in member.named_parameters())
    assert all(m.approximate == "none" for m in member.modules() if isinstance(m, torch.nn.GELU))
    assert any(isinstance(m, torch.nn.GELU) for m in member.modules())
    args.member_choices = "gpt2"
    assert any(n.endswith("bias") for n, _ in build_model("tfamily", 11, args).named_parameters())
    text = tmp_path / "tiny.txt"
    text.write_text("to be or not to be, that is the question.\n" * 60)
    assert main(["bench", "recipe", "--corpus", str(text), "--d-model", "32", "--layers", "1", "--heads", "2",
                 "--seq-len", "16", "--batch", "4", "--steps", "2", "--eval-every", "2", "--seeds", "0",
                 "--models", "tfamily", "nanogpt", "--member-choices", "nanogpt", "--out", str(tmp_path / "o")]) == 0
