"""Members as their papers from the first command: the default `tfamily train -c tiny --member X`
run exercises the mechanism X's paper is about (memory carried across segments, a pattern that
is sparse at the run's context, ACT halting, a gated residual); an explicit setting still wins,
with one line saying what it turns off."""
from __future__ import annotations

import json

import pytest
import torch

from tfamily import cli, members
from tfamily.build import pattern as layer_pattern
from tfamily.nn.kernels.lsh import LSHKernel, lsh_buckets, lsh_windows
from tfamily.nn.patterns import Causal, Full, SoftPattern, dense_mask
from tfamily.nn.residual.gates import GRUGate
from tfamily.train import loop, resolve
from tfamily.train.config import load

FAST = ["train.precision=fp32", "train.progress=false", "train.tensorboard=false"]  # no autotune timing


def mechanisms(name: str) -> list[str]:
    """What the member's paper is about, read from its preset (decoders: `-c tiny` trains text)."""
    s = members.get(name)()
    if s.model != "decoder":
        return []
    found = ["memory"] if resolve.carries_state(s.to_dict()) else []
    found += ["lsh"] if s.kernel.name == "lsh" else []
    found += ["sparse"] if not isinstance(layer_pattern(s, 0), (Causal, Full, SoftPattern)) else []
    found += ["act"] if s.depth.name == "universal_act" else []
    return found + (["gate"] if s.residual.name.endswith("_gate") else [])


WITH_MECHANISM = [n for n in members.REGISTRY if mechanisms(n)]


def test_every_member_with_a_mechanism_is_covered():
    assert set(WITH_MECHANISM) == {
        "sparse_transformer_strided", "sparse_transformer_fixed", "longformer", "bigbird", "image_transformer_1d",
        "image_transformer_2d", "reformer", "transformer_xl", "adaptive_span", "gtrxl", "trxl_i",
        "universal_transformer_lm", "rnn_lm", "lstm_lm", "gru_lm"}


def tiny(name: str, tmp_path, *overrides: str) -> loop.Trainer:
    return loop.Trainer(load("tiny", [f"member={name}", f"train.out={tmp_path / name}", *FAST, *overrides]))


def head_densities(spec, n: int) -> torch.Tensor:
    """(layers, heads) kept fraction of the causal scores at length n, over the member's own depth
    (the tiny run keeps 2 layers; the pattern's per-layer sizes are the member's)."""
    full = spec.replace(depth__n_layers=members.get(spec.member)().depth.n_layers)
    causal = n * (n + 1) / 2
    return torch.stack([dense_mask(layer_pattern(full, i), n, n, n_heads=spec.heads.n_heads).sum((1, 2)) / causal
                        for i in range(full.depth.n_layers)])


def lsh_density(kernel: LSHKernel, n: int, n_heads: int) -> float:
    """The kept fraction of the causal scores, union over the hash rounds, for random keys."""
    buckets = lsh_buckets(torch.randn(1, n_heads, n, 16), kernel.buckets_for(n), kernel.n_hashes)
    seen = lsh_windows(buckets, kernel.chunk_len, causal=True).any(2)
    return float(seen.sum() / (n_heads * n * (n + 1) / 2))


@pytest.mark.parametrize("name", WITH_MECHANISM)
def test_the_default_tiny_run_exercises_the_papers_mechanism(name, tmp_path):
    tr = tiny(name, tmp_path)
    n = tr.task.seq_len
    for _ in range(2):
        loss, _, _ = tr.train_step()
    assert torch.isfinite(torch.tensor(loss))
    found = mechanisms(name)
    if "memory" in found:  # Dai et al. 2019, section 3.2; truncated BPTT: the state crosses segments
        assert tr.task.stream and tr.task.carries_state and tr.cfg.data.stream is True
        saved = tr.state.state_dict()
        assert saved["offset"] == 2 * n and any(isinstance(v, torch.Tensor) and v.numel() for v in saved.values())
    if "sparse" in found:  # at this context no layer or head of the member is causal attention
        dens = head_densities(tr.spec, n)
        assert float(dens.max()) < 1.0, dens
    if "lsh" in found:  # several chunks and buckets: a query sees a fraction of the earlier keys
        kernel = next(m.kernel for m in tr.model.modules() if isinstance(getattr(m, "kernel", None), LSHKernel))
        assert kernel.chunk_len < n and lsh_density(kernel, n, tr.spec.heads.n_heads) <= 0.5
    if "act" in found:  # Dehghani et al. 2019, section 2.2: halting weights the steps, ponder cost in the loss
        depth = tr.model.stack
        tr.model.loss(tr.task.next())[0].backward()
        assert float(depth.aux_loss().detach()) > 0 and float(depth.halting.linear.weight.grad.abs().sum()) > 0
    if "gate" in found:  # Parisotto et al. 2019, section 3.2: a GRU-type gate replaces each residual sum
        assert sum(isinstance(m, GRUGate) for m in tr.model.modules()) == 2 * tr.spec.depth.n_layers


def test_data_stream_false_is_kept_and_said_in_one_line(tmp_path, capsys):
    tr = tiny("transformer_xl", tmp_path, "data.stream=false")
    assert not tr.task.stream and tr.state is None
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    assert len(err) == 1 and "data.stream=false" in err[0] and "xl_memory" in err[0], err
    assert tr.notes == [err[0].removeprefix("note: ")]


def test_an_explicit_size_wins_and_a_dense_pattern_is_named(tmp_path, capsys):
    tr = tiny("bigbird", tmp_path, "model.pattern.params.block=64")
    assert tr.spec.pattern.params["block"] == 64
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    assert len(err) == 1 and err[0].startswith("note: pattern bigbird is dense at context 64"), err
    scaled = tiny("bigbird", tmp_path / "b")
    assert scaled.spec.pattern.params["block"] == 4
    assert "bigbird at context 64: pattern.params.block 64 -> 4" in capsys.readouterr().err


@pytest.mark.parametrize("name", [n for n in members.REGISTRY if members.REGISTRY[n].at_context])
def test_the_rules_keep_the_papers_sizes_at_the_papers_context(name):
    spec = members.get(name)()
    n = spec.position.max_len if spec.position.name == "learned" else 65536  # Reformer: enwik8-64K
    cfg = load(None, {"member": name})
    d = spec.to_dict()
    assert resolve.at_context(cfg, d, n) == (d, None)
    shorter, note = resolve.at_context(cfg, d, 64)
    assert shorter != d and note.startswith(f"{name} at context 64: ")


def test_eval_of_a_default_xl_run_carries_memory(tmp_path, capsys):
    out = tmp_path / "xl"
    assert cli.main(["train", "-c", "tiny", "--member", "transformer_xl", "--steps", "2", "--out", str(out),
                     "train.eval_tokens=1024", *FAST, "--json"]) == 0
    trained = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert trained["notes"] == []
    assert cli.main(["eval", str(out), "--max-tokens", "1024", "--mem-len", "128", "--json"]) == 0
    longer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert longer["mem_len"] == 128 and longer["val_loss"] > 0
