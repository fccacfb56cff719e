"""The reverse-dictionary comparison: metrics by hand, runs share everything but the member, the
decoder returns each pair's headword in input order, and a tiny run writes its tables. On a
generated file in GCIDE's layout, never the real data."""
from __future__ import annotations

import argparse
import json
import random

import pytest
import torch

from tfamily.build import build
from tfamily.members import lstm_seq2seq
from tfamily.models.generate import greedy_decode
from tfamily.repro import REPROS, reverse_dictionary as rd
from tfamily.settings.run import DataConfig
from tfamily.train.config import load
from tfamily.train.tasks.reverse_dictionary import ReverseDictionaryTask


def _args(*argv):
    p = argparse.ArgumentParser()
    rd.add_args(p)
    return p.parse_args(list(argv))


def write_dictionary(path, n_words: int = 120, seed: int = 0):
    rng = random.Random(seed)
    words = sorted({"".join(rng.choice("abcdef") for _ in range(rng.randint(3, 6))) for _ in range(n_words)})
    path.write_text("\n".join(f"{w.capitalize()} \\{w}\\, n.\n   Meaning of {i}; {w[::-1]}.\n   [1913 Webster]\n"
                              for i, w in enumerate(words)))
    return path


def test_score_by_hand():
    exact, char = rd.score(["cat", "dgo", "do", "dogs"], ["cat", "dog", "dog", "dog"])
    assert exact == 0.25  # only "cat"; "dogs" is too long
    assert char == pytest.approx((3 + 1 + 2 + 3) / 12)
    with pytest.raises(ValueError, match="one prediction per target"):
        rd.score(["a"], ["a", "b"])


def test_evenly():
    assert rd.evenly(list(range(10)), 5) == [0, 2, 4, 6, 8]
    assert rd.evenly(list(range(10)), 3) == [0, 3, 6]
    assert rd.evenly(list(range(4)), 0) == rd.evenly(list(range(4)), 9) == [0, 1, 2, 3]


def test_runs_differ_only_in_the_member(tmp_path):
    assert REPROS["reverse-dictionary"] == "tfamily.repro.reverse_dictionary"
    args = _args()
    plans = {m: rd.overrides(m, args, tmp_path) for m in rd.MODELS}
    mine = ("member", "name", "train.out", "model.depth.n_layers", "model.heads.n_heads", "model.ff.d_ff",
            "model.depth.params.alignment")
    shared = {k: v for k, v in plans["lstm"].items() if k not in mine}
    for name, o in plans.items():
        assert {k: v for k, v in o.items() if k not in mine} == shared
        cfg = load(None, o)
        assert cfg.data.task == "reverse_dictionary" and cfg.train.time_budget == 180.0
    assert [plans[m]["model.depth.params.alignment"] for m in ("luong_dot", "luong_general", "luong_concat")] == \
        ["dot", "general", "concat"]
    assert plans["transformer"]["member"] == "vanilla" and plans["ut"]["member"] == "universal_transformer"
    with pytest.raises(ValueError, match="--d-model 250"):
        rd.run(_args("--d-model", "250"))


def test_decode_pairs_keeps_input_order(tmp_path):
    cfg = DataConfig(corpus=None, task="reverse_dictionary",
                     task_params={"path": str(write_dictionary(tmp_path / "d.txt"))})
    task = ReverseDictionaryTask(cfg, 4)
    torch.manual_seed(0)
    net = build(lstm_seq2seq(vocab_size=task.vocab_size, d_model=16, depth__n_layers=1))
    pairs = task.pairs("train")[:9]
    got = rd.decode_pairs(net, task, pairs, beam=1, batch_size=4, device="cpu")
    for p, g in zip(pairs, got):  # one at a time, no padding: the same headword
        b = task.batch([p])
        ids = greedy_decode(net, b["src"], bos=task.bos, eos=task.eos, max_len=task.max_word_len + 1)
        assert g == task.decode(ids[0, 1:].tolist())
    assert rd.decode_pairs(net, task, pairs[::-1], beam=1, batch_size=4, device="cpu") == got[::-1]


def test_tiny_run_writes_the_tables(tmp_path, capsys):
    path = write_dictionary(tmp_path / "d.txt")
    out = tmp_path / "out"
    args = _args("--steps", "2", "--models", "lstm", "luong_concat", "transformer", "--d-model", "16",
                 "--heads", "2", "--layers", "1", "--eval-pairs", "4", "--beam", "2", "--val-tokens", "100",
                 "--batch-size", "4", "--threads", "1", "--gcide", str(path), "--out", str(out), "--json")
    assert rd.run(args) == 0
    rows = json.loads((out / "results.json").read_text())
    assert [r["model"] for r in rows] == ["lstm", "luong_concat", "transformer"]
    for r in rows:
        assert r["steps"] == 2 and r["test_pairs"] == 4
        assert all(0.0 <= r[k] <= 1.0 for k in ("greedy_exact", "greedy_char", "beam_exact", "beam_char"))
    assert (out / "results.csv").read_text().startswith("model,member,params,steps")
    md = (out / "results.md").read_text()
    assert "| luong_concat | `luong_attention` |" in md and "beam 2 exact" in md
    assert json.loads(capsys.readouterr().out) == rows


def test_steps_with_a_time_cap(tmp_path):
    o = rd.overrides("lstm", _args("--steps", "500", "--time-cap", "30"), tmp_path)
    assert (o["train.max_steps"], o["train.time_budget"]) == (500, 30.0)  # both: whichever comes first
    o = rd.overrides("lstm", _args("--steps", "500"), tmp_path)
    assert (o["train.max_steps"], o["train.time_budget"]) == (500, None)
    with pytest.raises(ValueError, match="--time-cap caps a --steps budget.*without --steps"):
        rd.run(_args("--time-cap", "30"))
    with pytest.raises(ValueError, match=r"must be > 0 seconds \(got -1.0"):
        rd.run(_args("--steps", "5", "--time-cap", "-1"))
