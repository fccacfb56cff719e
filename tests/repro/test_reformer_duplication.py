"""`tfamily repro reformer-duplication` (Kitaev et al. 2020, section 5, table 2) at toy sizes:
the train-by-eval table is written, and its settings are checked."""
from __future__ import annotations

import argparse
import csv
import json

import pytest

from tfamily.repro import reformer_duplication as dup


def _args(module, argv):
    p = argparse.ArgumentParser()
    module.add_args(p)
    return p.parse_args(argv)


def test_duplication_repro_writes_the_train_by_eval_table(tmp_path, capsys):
    args = _args(dup, ["--length", "6", "--n-symbols", "4", "--steps", "2", "--d-model", "16", "--heads", "2",
                       "--bucket-size", "4", "--eval-sequences", "8", "--train", "full", "lsh2",
                       "--eval", "full", "lsh1", "lsh8", "--jobs", "1", "--out", str(tmp_path)])
    assert dup.run(args) == 0
    printed = capsys.readouterr().out
    assert "Full attention" in printed and "LSH-8" in printed
    with open(tmp_path / "table.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["train"] for r in rows] == ["full", "lsh2"]
    assert all(0.0 <= float(r[e]) <= 100.0 for r in rows for e in ("full", "lsh1", "lsh8"))
    assert json.loads((tmp_path / "table.json").read_text())["config"]["length"] == 6


def test_full_setting_is_one_chunk_and_bad_settings_are_refused():
    assert dup._setting("full", 127, 16)["chunk_len"] == 127
    assert dup._setting("lsh4", 127, 16) == {"n_hashes": 4, "bucket_size": 16}
    for bad in ("lsh0", "lsh", "dense"):
        with pytest.raises(ValueError, match=bad):
            dup._setting(bad, 127, 16)


def _flat_train(args, task, setting):
    """The reproduction's own loop before it joined the shared trainer: the flat reference."""
    import torch

    from tfamily.build import build
    torch.manual_seed(args.seed)
    model = build(dup.model_spec(args, task, setting)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    warmup = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    gen = torch.Generator().manual_seed(args.seed + 1)
    for _ in range(args.steps):
        loss, _ = model.loss(dup._batch(task, args.batch, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    return model


def test_task_on_the_shared_loop_learns_exactly_as_the_flat_loop(tmp_path):
    """With LSH attention, whose hashes draw from the global RNG, so the loop must draw nothing else."""
    setting = "lsh2"
    import torch

    from tfamily.data.synthetic import DuplicateTask
    args = _args(dup, ["--length", "6", "--n-symbols", "5", "--steps", "12", "--d-model", "16", "--heads", "2",
                       "--bucket-size", "4", "--batch", "4", "--lr", "0.01", "--seed", "3", "--out", str(tmp_path)])
    task = DuplicateTask(n_symbols=args.n_symbols, length=args.length)
    got, _ = dup.train(args, task, setting)
    want = _flat_train(args, task, setting).state_dict()
    assert got.state_dict().keys() == want.keys()
    assert all(torch.equal(got.state_dict()[k], want[k]) for k in want)
