"""`tfamily eval RUN --data CORPUS|FILE|DIR` (train/eval_data.py): any corpus scored with the run's
vocabulary, checked against a direct computation of the loss on the split's windows; every output names
the corpus and the split it scored."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from tfamily import cli
from tfamily.data.prepared import load_prepared
from tfamily.train.sample import load_trained

LM = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
      "model.position.max_len=64", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
      "train.progress=false", "train.tensorboard=false", "train.warmup=1", "train.threads=1",
      "train.precision=fp32", "--steps", "2"]
SEQ = 32


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """A character-level run on Tiny Shakespeare, a byte-level run on a text file, that text, and the
    text prepared as a byte-level folder."""
    d = tmp_path_factory.mktemp("evaldata")
    text = d / "play.txt"
    names = ("Hamlet", "Ophelia", "Horatio", "Laertes", "Polonius")
    text.write_text("".join(f"{names[i % 5]}: to be, or not to be, that is the question.\n" for i in range(120)))
    assert cli.main(["train", *LM, "--out", str(d / "char")]) == 0
    assert cli.main(["train", *LM, f"data.corpus={text}", "--out", str(d / "byte")]) == 0
    assert cli.main(["data", "prepare", str(text), "--vocab", "byte", "--out", str(d / "prepared"),
                     "--no-progress"]) == 0
    return {"d": d, "char": d / "char", "byte": d / "byte", "text": text, "prepared": d / "prepared"}


def _eval(capsys, *argv) -> dict:
    capsys.readouterr()
    assert cli.main(["eval", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@torch.no_grad()
def _reference_loss(run, ids: torch.Tensor) -> float:
    """The mean next-token loss over the split's consecutive windows of SEQ tokens, computed directly."""
    model = load_trained(run, "cpu").model
    n = (len(ids) - 1) // SEQ
    x = ids[: n * SEQ].reshape(n, SEQ).long()
    y = ids[1 : n * SEQ + 1].reshape(n, SEQ).long()
    return float(F.cross_entropy(model(x).flatten(0, 1), y.flatten()))


def test_the_output_names_the_corpus_and_the_split(runs, capsys):
    capsys.readouterr()
    assert cli.main(["eval", str(runs["char"]), "--max-tokens", "256"]) == 0
    assert "on the val split of tinyshakespeare" in capsys.readouterr().out.splitlines()[0]
    r = _eval(capsys, runs["char"], "--max-tokens", "256", "--split", "test")
    assert r["corpus"] == "tinyshakespeare" and r["split"] == "test" and "test_loss" in r


def test_data_naming_the_runs_own_corpus_scores_as_without_it(runs, capsys):
    own = _eval(capsys, runs["char"], "--max-tokens", "512")
    given = _eval(capsys, runs["char"], "--max-tokens", "512", "--data", "tinyshakespeare")
    assert given["val_loss"] == own["val_loss"] and given["eval_tokens"] == own["eval_tokens"] == 512


def test_a_text_file_is_scored_on_its_test_split_with_the_runs_characters(runs, capsys):
    """The character run reads the file with its own 65 characters (the file's would be fewer): the
    test split is the last 5% of the text, as for any text file."""
    run, vocab = runs["char"], load_trained(runs["char"], "cpu").vocab
    r = _eval(capsys, run, "--data", runs["text"], "--split", "test")
    ids = vocab.encode(runs["text"].read_text())
    n = len(ids)
    test = ids[int(n * 0.9) + int(n * 0.05):]
    assert r["corpus"] == str(runs["text"]) and r["split"] == "test"
    assert r["eval_tokens"] == (len(test) - 1) // SEQ * SEQ
    assert r["test_loss"] == pytest.approx(_reference_loss(run, test), rel=1e-5)


def test_a_prepared_folder_is_scored_through_its_reader(runs, capsys):
    corpus = load_prepared(runs["prepared"])
    for split in ("val", "test"):
        r = _eval(capsys, runs["byte"], "--data", runs["prepared"], "--split", split)
        ids = corpus.split(split)
        assert r["corpus"] == str(runs["prepared"]) and r["eval_tokens"] == (len(ids) - 1) // SEQ * SEQ
        assert r[f"{split}_loss"] == pytest.approx(_reference_loss(runs["byte"], torch.as_tensor(ids)), rel=1e-5)
