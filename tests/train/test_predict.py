"""`tfamily predict` and `tfamily.load(RUN).predict` (train/predict.py): a classifier's label and
probabilities per text, the same batched as alone, and the same answers `tfamily eval` scores."""
from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys

import pytest
import torch

import tfamily
from tfamily import cli

LM = ["model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1", "model.position.max_len=64",
      "data.seq_len=32", "train.batch_size=8", "train.progress=false", "train.tensorboard=false", "train.warmup=1",
      "train.threads=1", "train.precision=fp32", "train.lr=3e-3", "--steps", "12"]
TEXTS = ["a fine, warm film", "dull", "warm and fine and good, a film to see again", "cold, dull and long"]


def _rows(n: int) -> list[tuple[str, str]]:
    good, bad = ("fine", "warm", "good", "kind"), ("dull", "cold", "long", "grim")
    return [(" ".join((good if i % 2 else bad)[(i + k) % 4] for k in range(1 + i % 5)), "pos" if i % 2 else "neg")
            for i in range(n)]


def _csv(path, rows, split=None):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"] + (["split"] if split else []))
        w.writerows([(*r, split) if split else r for r in rows])
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Two classifiers of one labelled file: a causal gpt (last-token pooling, no padding mask) and a
    bert (mean pooling over the real tokens, the padding masked)."""
    d = tmp_path_factory.mktemp("predict")
    data = _csv(d / "reviews.csv", _rows(80))
    for member in ("gpt", "bert"):
        assert cli.main(["train", f"member={member}", *LM, f"data.corpus={data}", "--out", str(d / member)]) == 0
    return {"d": d, "gpt": d / "gpt", "bert": d / "bert"}


@pytest.mark.parametrize("member", ["gpt", "bert"])
def test_a_batch_gives_each_text_what_it_gets_alone(runs, member):
    run = tfamily.load(runs[member], device="cpu")
    model, vocab, spec = run
    assert spec.model == "classifier" and vocab.name == "byte" and not model.training and run.labels == ("neg", "pos")
    batched = run.predict(TEXTS, batch_size=3)  # rows of different lengths, right-padded
    alone = [run.predict(t)[0] for t in TEXTS]
    for b, a in zip(batched, alone):
        assert b.label == a.label and list(b.probs) == ["neg", "pos"]
        assert torch.allclose(torch.tensor(list(b.probs.values())), torch.tensor(list(a.probs.values())), atol=1e-5)
        assert sum(b.probs.values()) == pytest.approx(1.0) and b.probs[b.label] == max(b.probs.values())


def test_predict_agrees_with_evals_accuracy(runs, capsys):
    """The share of a labelled file's rows predict labels right is eval's accuracy on that file."""
    rows = _rows(30)
    data = _csv(runs["d"] / "val.csv", rows, split="val")
    preds = tfamily.load(runs["gpt"], device="cpu").predict([t for t, _ in rows])
    right = sum(p.label == label for p, (_, label) in zip(preds, rows)) / len(rows)
    capsys.readouterr()
    assert cli.main(["eval", str(runs["gpt"]), "--data", str(data), "--json"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["corpus"] == str(data) and r["split"] == "val" and r["val_acc"] == pytest.approx(right)


def test_the_command_reads_texts_a_file_and_prints_json(runs, tmp_path, capsys):
    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(TEXTS[:2]) + "\n\n")
    table = _csv(tmp_path / "t.csv", [(t, "x") for t in TEXTS[:2]])
    expect = tfamily.load(runs["gpt"], device="cpu").predict(TEXTS[:2])
    for given in (["--text", *TEXTS[:2]], ["--file", str(lines)], ["--file", str(table)]):
        capsys.readouterr()
        assert cli.main(["predict", str(runs["gpt"]), *given, "--json", "--batch-size", "1"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["labels"] == ["neg", "pos"] and [p["text"] for p in out["predictions"]] == TEXTS[:2]
        assert [p["label"] for p in out["predictions"]] == [p.label for p in expect]
        for got, want in zip(out["predictions"], expect):
            assert got["probs"] == pytest.approx(want.probs, abs=1e-6)
    assert cli.main(["predict", str(runs["gpt"]), "--text", TEXTS[0]]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(expect[0].label) and repr(TEXTS[0]) in line


def test_predict_help_imports_no_torch():
    probe = ("import sys\nfrom tfamily.cli import main\ntry:\n    main(['predict', '--help'])\nexcept SystemExit:\n"
             "    pass\nprint('torch imported:', 'torch' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert "--text T" in done.stdout and "--file F" in done.stdout and "torch imported: False" in done.stderr


def test_a_classifier_of_a_synthetic_task_is_pointed_at_eval(runs):
    from tfamily.train.predict import check_classifier
    run = tfamily.load(runs["gpt"], device="cpu")
    meta = {**run.meta, "config": {**run.meta["config"], "data": {"task": "listops", "corpus": None}}}
    with pytest.raises(ValueError, match=r"classifies the synthetic task 'listops', not text; score it with "
                                         r"`tfamily eval .*CSV or JSONL"):
        check_classifier(dataclasses.replace(run, labels=(), vocab=None, meta=meta))
