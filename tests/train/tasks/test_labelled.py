"""A user's labelled text file as a classification task: labels to ids, the split, padding, refusals."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from tfamily.data import ByteVocab
from tfamily.settings.run import DataConfig
from tfamily.train.tasks import make_task
from tfamily.train.tasks.labelled import assign, is_labelled


def _csv(path, rows, header=("text", "label")):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return str(path)


def _task(corpus, **kw):
    return make_task(DataConfig(corpus=corpus, seq_len=kw.pop("seq_len", 16), **kw), 4, seed=0)


def test_labels_sorted_ids_and_a_fixed_held_out_tenth(tmp_path):
    rows = [(f"text number {i}", ["10", "2", "1"][i % 3]) for i in range(30)]
    task = _task(_csv(tmp_path / "a.csv", rows))
    assert is_labelled(str(tmp_path / "a.csv")) and not is_labelled("tinyshakespeare")
    assert task.labels == ("1", "2", "10") and task.n_classes == 3 and task.kind == "classification"
    assert len(task.val) == 2 and len(task.test) == 1 and isinstance(task.vocab, ByteVocab)  # 3 held out: 2 + 1
    again = _task(_csv(tmp_path / "b.csv", rows))
    assert torch.equal(task.val.x, again.val.x)  # the same rows held out, whatever the seed
    b = task.next()
    assert b["x"].shape == (4, 14) and set(b["key_padding"].sum(1).tolist()) <= {13, 14}  # right-padded
    assert task.state_dict()["labels"] == ["1", "2", "10"]


def test_a_split_column_and_jsonl(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"text": "a" * (i + 1), "label": i % 2, "split": "train" if i < 6 else "dev"} for i in range(8)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = _task(str(path), seq_len=5)
    assert len(task.val) == 2 and task.val.x.shape == (2, 5)  # cut to data.seq_len
    assert task.val.key_padding.all()
    with pytest.raises(ValueError, match="no test rows"):
        _task(str(path), eval_split="test")


@pytest.mark.parametrize("rows, header, match", [
    ([("x", "a"), ("y", "a")], ("text", "label"), "one label"),
    ([("x", "")], ("text", "label"), "lacks a text or a label"),
    ([("x", "a")], ("body", "label"), "lacks a text or a label"),
    ([("x", "a", "holdout")], ("text", "label", "split"), "has split 'holdout'"),
])
def test_refusals_name_the_row_and_the_fix(tmp_path, rows, header, match):
    with pytest.raises(ValueError, match=match):
        _task(_csv(tmp_path / "bad.csv", rows, header))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _task(str(tmp_path / "missing.csv"))


def _old_held_out(n: int) -> set[int]:
    """The rows the split held out before it had a test half: a tenth (at least one) of a fixed permutation."""
    return set(np.random.default_rng(0).permutation(n)[:max(1, n // 10)].tolist())


@pytest.mark.parametrize("n", [3, 19, 20, 101, 1000])
def test_without_a_split_column_val_and_test_halve_the_old_held_out_tenth(n):
    """90/5/5 as a text file: the training rows are the ones before, so a run trained then is scored only
    on rows it never saw; validation takes the first half (rounded up), test the rest."""
    split = assign([{"text": "t", "label": "a"}] * n)
    held = _old_held_out(n)
    assert {i for i, s in enumerate(split) if s != "train"} == held
    val, test = split.count("val"), split.count("test")
    assert val == (len(held) + 1) // 2 and test == len(held) // 2
    assert (test > 0) == (n >= 20)


def test_a_file_too_small_for_a_test_split_says_what_to_do(tmp_path):
    path = _csv(tmp_path / "small.csv", [(f"row {i}", "ab"[i % 2]) for i in range(12)])
    assert len(_task(path).val) == 1
    with pytest.raises(ValueError, match=r"small.csv has 12 rows and no split column: too few for a test split.*"
                                         r"20 rows or more.*split=test.*--split val"):
        _task(path, eval_split="test")


def test_a_trained_runs_labels_keep_their_ids_on_another_file(tmp_path):
    from tfamily.train.tasks.labelled import make
    path = _csv(tmp_path / "pos.csv", [(f"good {i}", "pos") for i in range(20)] + [("bad", "neg")])
    task = make(DataConfig(corpus=path, seq_len=8), 4, labels=["neg", "pos", "so-so"])
    assert task.labels == ("neg", "pos", "so-so") and set(torch.cat([task.val.y, task.test.y]).tolist()) <= {0, 1}
    with pytest.raises(ValueError, match=r"row 22 has label 'meh', which the run was not trained on \(its labels: "
                                         r"neg, pos\)"):
        make(DataConfig(corpus=_csv(tmp_path / "m.csv", [("x", "pos")] * 20 + [("y", "meh")]), seq_len=8), 4,
             labels=["neg", "pos"])
