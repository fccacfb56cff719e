"""The reverse-dictionary task on a generated file in GCIDE's layout (never the real data):
batches decode back to their pairs, come only from the training split, resume by step, shard
by rank, and evaluation walks the chosen split in order."""
from __future__ import annotations

import random

import pytest
import torch

from tfamily.data.paths import DataNotFoundError
from tfamily.settings.run import DataConfig
from tfamily.train.tasks import make_task
from tfamily.train.tasks.reverse_dictionary import ReverseDictionaryTask


def write_dictionary(path, n_words: int = 240, seed: int = 0):
    rng = random.Random(seed)
    words = sorted({"".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 9))) for _ in range(n_words)})
    entries = []
    for i, w in enumerate(words):
        senses = "".join(f"   {k + 1}. Meaning {k} of word {i}; {'z' * rng.randint(0, 30)}.\n      [1913 Webster]\n\n"
                         for k in range(rng.randint(1, 3)))
        entries.append(f'{w.capitalize()} \\{w}\\, n. [L. {w}.]\n{senses}')
    path.write_text("\n".join(entries))
    return path


def task(tmp_path, batch_size=8, **kw):
    params = {"path": str(write_dictionary(tmp_path / "dict.txt"))}
    cfg = DataConfig(corpus=None, task="reverse_dictionary", task_params=params, eval_split=kw.pop("split", "val"))
    return ReverseDictionaryTask(cfg, batch_size, **kw)


def pairs_of(t, batch) -> list[tuple[str, str]]:
    out = []
    for src, pad, tin, tout, tpad in zip(batch["src"], batch["src_padding"], batch["tgt_in"], batch["tgt_out"],
                                         batch["tgt_padding"]):
        n = int(tpad.sum())
        assert tin[0] == t.bos and tout[n - 1] == t.eos and torch.equal(tin[1:n], tout[:n - 1])
        assert not (tin[:n] == t.eos).any() and not (tout[:n - 1] == t.bos).any()
        out.append((t.vocab.decode(src[pad]), t.vocab.decode(tout[:n - 1])))
    return out


def test_batches_are_training_pairs(tmp_path):
    t = task(tmp_path, seed=3)
    train = set(t.pairs("train"))
    assert t.vocab_size == t.vocab.size + 2 and (t.bos, t.eos) == (t.vocab.size, t.vocab.size + 1)
    seen = []
    for _ in range(20):
        b = t.next()
        assert b["src"].shape[0] == 8 and torch.equal(b["loss_mask"], b["tgt_padding"])
        assert int(b["src_padding"].sum(1).max()) == b["src"].shape[1] <= t.seq_len
        assert t.size(b) == b["src"].numel() + b["tgt_in"].numel()
        seen += pairs_of(t, b)
    assert set(seen) <= train and len(set(seen)) > 40
    words = {w for _, w in seen}
    assert not words & {w for _, w in t.pairs("valid") + t.pairs("test")}


def test_position_resumes_and_ranks_shard(tmp_path):
    a = task(tmp_path, seed=5)
    for _ in range(3):
        a.next()
    state = a.state_dict()
    want = a.next()
    b = task(tmp_path, seed=0)
    b.load_state_dict(state)
    got = b.next()
    assert all(torch.equal(want[k], got[k]) for k in want)
    whole = task(tmp_path, batch_size=8, seed=2)
    halves = [task(tmp_path, batch_size=4, seed=2, rank=r, world_size=2) for r in range(2)]
    for _ in range(3):
        full = pairs_of(whole, whole.next())
        assert full == pairs_of(halves[0], halves[0].next()) + pairs_of(halves[1], halves[1].next())
    with pytest.raises(ValueError, match="global_batch"):
        task(tmp_path, batch_size=3).load_state_dict(state)


@pytest.mark.parametrize("split, name", [("val", "valid"), ("test", "test")])
def test_eval_walks_the_split_in_order(tmp_path, split, name):
    t = task(tmp_path, split=split)
    got = [p for b in t.eval_batches(None, 5) for p in pairs_of(t, b)]
    assert got == t.pairs(name) and len(got) > 5
    assert t.eval_size(None) == sum(len(d) + len(w) + 1 for d, w in got)
    some = [p for b in t.eval_batches(40, 5) for p in pairs_of(t, b)]
    assert some == got[:len(some)] and 0 < len(some) < len(got)
    ranks = [task(tmp_path, split=split, rank=r, world_size=2) for r in range(2)]
    shards = [[p for b in r.eval_batches(None, 6) for p in pairs_of(r, b)] for r in ranks]
    assert shards[0] == got[0::2] and shards[1] == got[1::2]


def test_make_task_wiring_and_errors(tmp_path, monkeypatch):
    path = str(write_dictionary(tmp_path / "dict.txt"))
    cfg = DataConfig(corpus=None, task="reverse_dictionary", task_params={"path": path})
    assert isinstance(make_task(cfg, 4, seed=0, objective="seq2seq"), ReverseDictionaryTask)
    with pytest.raises(ValueError, match="encoder-decoder"):
        make_task(cfg, 4, seed=0, objective="causal_lm")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['max_len'\]"):
        make_task(DataConfig(corpus=None, task="reverse_dictionary", task_params={"max_len": 3}), 4, seed=0,
                  objective="seq2seq")
    monkeypatch.delenv("TFAMILY_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataNotFoundError, match="TFAMILY_DATA"):
        make_task(DataConfig(corpus=None, task="reverse_dictionary"), 4, seed=0, objective="seq2seq", data_dir=empty)


def test_trains_through_the_cli(tmp_path, capsys):
    from tfamily.cli import main
    path = write_dictionary(tmp_path / "dict.txt")
    rc = main(["train", "--member", "luong_attention", "--steps", "3", "--out", str(tmp_path / "run"), "--json",
               "data.corpus=null", "data.task=reverse_dictionary", f"data.task_params.path={path}",
               "model.d_model=16", "model.depth.n_layers=1", "train.batch_size=4", "train.eval_tokens=200",
               "train.progress=false", "train.tensorboard=false", "train.threads=1", "train.precision=fp32"])
    assert rc == 0
    assert '"steps": 3' in capsys.readouterr().out
