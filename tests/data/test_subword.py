"""Byte-level BPE vocabularies (data.vocab=bpe:N): trained once per training text and size,
splits cut where the byte vocabulary cuts them, characters per token that sum to the text,
bits per character in one unit for every vocabulary, and a run end to end."""
from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from tfamily import cli
from tfamily.data import load_corpus
from tfamily.data.corpora import clear_corpus_cache
from tfamily.data.subword import bits_per_char, bpe_size, encode, split_text, train_bpe
from tfamily.settings.run import DataConfig
from tfamily.train.tasks.text import TextTask

WORDS = "the king and queen of fair verona where we lay our scene from ancient grudge break to new mutiny".split()


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))).capitalize() + "."
             for _ in range(1500)]
    path = tmp_path_factory.mktemp("subword") / "play.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_bpe_sizes_parse_and_refuse_in_one_line():
    assert bpe_size("bpe:512") == 512 and bpe_size("bpe") == 1024 and bpe_size("char") is None
    for bad in ("bpe:abc", "bpe:100", "bpe:-3"):
        with pytest.raises(ValueError, match=r"integer in \[257, .*e\.g\. data.vocab=bpe:1024"):
            bpe_size(bad)


def test_bits_per_char_is_total_nats_over_characters():
    assert bits_per_char(100 * math.log(2), 50) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="at least one scored character"):
        bits_per_char(1.0, 0)


def test_characters_per_token_sum_to_the_text_and_cuts_respect_characters(text_file):
    vocab = train_bpe(text_file.read_text(), 300)
    text = "Fair verona — naïve café\nwhere we lay"
    ids, chars = encode(vocab, text)
    assert vocab.decode(ids) == text and chars.sum() == len(text) and (chars >= 0).all()
    raw = np.frombuffer("aé".encode() * 3, dtype=np.uint8)  # a cut after 2 bytes falls inside é
    assert split_text(raw, [2, 4, 3], "x") == ["a", "éaé", "aé"]


def test_bpe_trains_once_then_reads_the_cache(text_file, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = train_bpe("a b c ab ab abc abc\n" * 50, 260)
    cached = list((tmp_path / "tfamily" / "bpe").glob("*-260-*.json"))
    assert len(cached) == 1 and first.size == 260
    cached[0].write_text(train_bpe("x y xy\n" * 50, 258).json)  # what the cache holds is what comes back
    assert train_bpe("a b c ab ab abc abc\n" * 50, 260).size == 258


def test_bpc_is_nats_over_the_characters_scored_for_byte_and_bpe(text_file):
    """Every vocabulary reports total nats over the characters of the text its targets cover."""
    clear_corpus_cache()
    for vocab in ("byte", "bpe:300"):
        task = TextTask(DataConfig(corpus=str(text_file), vocab=vocab, seq_len=16), 4)
        batches = list(task.eval_batches(400, 4))
        targets = np.concatenate([b["y"].reshape(-1).numpy() for b in batches])
        chars = len(task.vocab.decode(targets))  # ASCII text: bytes are characters
        loss = 1.7  # nats per token, as the evaluation averages it
        got = task.eval_metrics(loss)["bpc"]
        assert got == pytest.approx(loss * len(targets) / chars / math.log(2), rel=1e-6), vocab
    corpus = load_corpus(text_file, vocab="bpe:300")  # the splits are the byte vocabulary's
    byte = load_corpus(text_file, vocab="byte")
    assert [int(corpus.chars(s).sum()) for s in ("train", "val", "test")] == [
        len(byte.split(s)) for s in ("train", "val", "test")]


def test_bpe_run_trains_evaluates_generates_and_exports(text_file, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "-c", "tiny", f"data.corpus={text_file}", "data.vocab=bpe:300", "data.seq_len=32",
            "model.position.max_len=32", "model.d_model=32", "train.batch_size=4", "train.eval_tokens=256",
            "train.progress=false", "train.tensorboard=false", "--steps", "3", "--out", str(out), "--json"]
    assert cli.main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["val_bpc"] < result["val_loss"] / math.log(2)  # a token stands for more than one character
    step = next((out / "checkpoints").glob("step-*"))
    meta = json.loads((step / "meta.json").read_text())
    assert meta["vocab"]["type"] == "tokenizer" and meta["spec"]["vocab_size"] == 300
    assert (step / "tokenizer.json").read_text() == (out / "tokenizer.json").read_text() == meta["vocab"]["json"]
    assert cli.main(["eval", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["val_bpc"] > 0
    assert cli.main(["generate", str(out), "--prompt", "The king", "--tokens", "5", "--greedy"]) == 0
    assert capsys.readouterr().out.startswith("The king")
    assert cli.main(["export", str(out), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "tokenizer.json").read_text() == meta["vocab"]["json"]
