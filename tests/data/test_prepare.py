"""`tfamily data prepare`: the same tokens and bits per character as the in-memory corpus where the
splits coincide, documents split whole and joined by one counted token, the vocabularies (char from
the training split, BPE on a sample, a lent tokenizer.json and its end-of-text), and a prepare that
fails or is stopped leaves nothing behind."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from tfamily import cli
from tfamily.data import load_corpus
from tfamily.data import prepare as prep
from tfamily.data.corpora import clear_corpus_cache
from tfamily.data.prepare import PrepareSettings, prepare, split_of, token_dtype

WORDS = "the king and queen of fair verona where we lay our scene from ancient grudge break to new mutiny".split()


def _doc(rng: random.Random) -> str:
    return "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))).capitalize() + "."
                     for _ in range(rng.randint(1, 6)))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("prepare")
    rng = random.Random(0)
    (d / "play.txt").write_text("\n".join(_doc(rng) for _ in range(300)) + "\n", encoding="utf-8")
    docs = [_doc(rng) for _ in range(120)]
    (d / "docs.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(docs)))
    return d, docs


def _prep(out, sources, vocab, **kw):
    return prepare(PrepareSettings(sources=[str(s) for s in sources], vocab=vocab, out=str(out), progress=False, **kw))


@pytest.mark.parametrize("vocab", ["byte", "char", "bpe:300"])
def test_a_prepared_file_is_the_in_memory_corpus_split_for_split(files, tmp_path, vocab):
    """One file is cut by position as the in-memory path cuts it: the same tokens in every split and,
    for BPE, the same characters per token (so the same bits per character)."""
    d, _ = files
    clear_corpus_cache()
    folder, m = _prep(tmp_path / "p", [d / "play.txt"], vocab)
    ours = load_corpus(folder)
    raw = load_corpus(d / "play.txt", vocab=vocab)
    assert m["split"]["by"] == "position" and m["join"] is None and ours.vocab == raw.vocab
    for split in ("train", "val", "test"):
        assert torch.equal(ours.split(split).long(), raw.split(split).long()), split
        if vocab.startswith("bpe") and split != "train":
            assert torch.equal(ours.chars(split).long(), raw.chars(split).long())
            assert int(ours.chars(split).sum()) == m["splits"][split]["chars"]
    assert m["dtype"] == ("uint16" if vocab.startswith("bpe") else "uint8")


def test_training_on_a_prepared_file_gives_the_raw_paths_validation_bpc(files, tmp_path):
    d, _ = files
    folder, _ = _prep(tmp_path / "p", [d / "play.txt"], "bpe:300")
    tiny = ["train", "member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
            "model.position.max_len=64", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=2048",
            "train.progress=false", "train.tensorboard=false", "train.warmup=1", "train.threads=1",
            "train.precision=fp32", "--steps", "3", "--seed", "3"]
    bpc = []
    for corpus, extra in ((folder, []), (d / "play.txt", ["data.vocab=bpe:300"])):
        out = tmp_path / f"run{len(bpc)}"
        assert cli.main([*tiny, f"data.corpus={corpus}", *extra, "--out", str(out)]) == 0
        bpc.append(json.loads((out / "result.json").read_text())["val_bpc"])
    assert bpc[0] == bpc[1], bpc


def test_documents_go_whole_to_a_seeded_split_joined_by_one_counted_newline(files, tmp_path):
    d, docs = files
    folder, m = _prep(tmp_path / "p", [d / "docs.jsonl"], "char", val=0.2, test=0.2, seed=5)
    corpus = load_corpus(folder)
    want = {0: [], 1: [], 2: []}
    for i, t in enumerate(docs):
        want[split_of(5, i, 0.2, 0.2)].append(t)
    for k, name in enumerate(("train", "val", "test")):
        text = "\n".join(want[k])
        assert corpus.vocab.decode(corpus.split(name)) == text
        e = m["splits"][name]
        assert (e["documents"], e["tokens"], e["chars"]) == (len(want[k]), len(text), len(text))
    assert m["split"]["by"] == "document" and m["join"] == {"text": "\n", "ids": [corpus.vocab.chars.index("\n")],
                                                              "chars": 1}
    assert set(corpus.vocab.chars) == set("\n".join(want[0]))  # the training split's characters
    # another seed, another split of the same documents
    _, m2 = _prep(tmp_path / "p2", [d / "docs.jsonl"], "char", val=0.2, test=0.2, seed=6)
    assert m2["splits"]["val"]["documents"] != m["splits"]["val"]["documents"] or \
        m2["splits"]["val"]["tokens"] != m["splits"]["val"]["tokens"]


def test_bpe_documents_keep_characters_per_token_and_the_join_counts_one(files, tmp_path):
    d, docs = files
    folder, m = _prep(tmp_path / "p", [d / "docs.jsonl"], "bpe:280", val=0.2, test=0.2)
    corpus = load_corpus(folder)
    want = ["\n".join(t for i, t in enumerate(docs) if split_of(0, i, 0.2, 0.2) == k) for k in (1, 2)]
    for name, text in zip(("val", "test"), want):
        assert corpus.vocab.decode(corpus.split(name)) == text
        assert int(corpus.chars(name).sum()) == len(text) == m["splits"][name]["chars"]
    assert corpus.chars("train") is None and m["bpe_sample_chars"] == m["splits"]["train"]["chars"]


def test_the_bpe_is_trained_on_a_sample_of_the_size_asked(files, tmp_path):
    d, _ = files
    _, m = _prep(tmp_path / "p", [d / "docs.jsonl"], "bpe:280", bpe_sample_mb=0.01)
    # documents drawn at the share of the sources' bytes the budget is (JSON's own bytes counted), to the budget
    assert 5_000 < m["bpe_sample_chars"] < 10_000 + 2_000 < m["splits"]["train"]["chars"]


def test_a_large_file_cut_by_position_samples_its_bpe_from_pieces(files, tmp_path, monkeypatch):
    d, _ = files
    monkeypatch.setattr(prep.readers, "BLOCK", 2000)
    _, m = _prep(tmp_path / "p", [d / "play.txt"], "bpe:280", bpe_sample_mb=0.01)
    assert 5_000 < m["bpe_sample_chars"] < 10_000 + 2_000 < m["splits"]["train"]["chars"]


def test_tinyshakespeare_prepared_with_its_own_split_is_the_named_corpus(tmp_path):
    """--test 0: validation takes the rest of the file and test is validation, as for the named corpus."""
    from tfamily.data.paths import find_file
    folder, m = _prep(tmp_path / "p", [find_file("tinyshakespeare.txt")], "byte", val=0.1, test=0)
    ours, named = load_corpus(folder), load_corpus("tinyshakespeare", vocab="byte")
    assert m["splits"]["test"] is None and ours.split("test") is ours.split("val")
    assert all(torch.equal(ours.split(s), named.split(s)) for s in ("train", "val"))


def test_a_lent_tokenizer_joins_documents_with_its_end_of_text(files, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    d, docs = files
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    from tokenizers import trainers
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                      show_progress=False))
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    folder, m = _prep(tmp_path / "p", [d / "docs.jsonl"], str(tmp_path / "tok"), val=0.2, test=0.2)
    eot = tok.token_to_id("<|endoftext|>")
    assert m["tokenizer"] == "tokenizer.json" and m["join"]["ids"] == [eot]
    val = load_corpus(folder).split("val").long()
    assert int((val == eot).sum()) == m["splits"]["val"]["documents"] - 1
    # a prepared folder lends its vocabulary too: the same ids for the same text
    again, m2 = _prep(tmp_path / "q", [d / "docs.jsonl"], str(folder), val=0.2, test=0.2)
    assert m2["vocab"] == m["vocab"] and torch.equal(load_corpus(again).split("val"), load_corpus(folder).split("val"))


def test_shards_take_the_smallest_dtype_that_holds_the_vocabulary():
    assert [token_dtype(n).name for n in (256, 257, 65536, 65537)] == ["uint8", "uint16", "uint16", "uint32"]


def test_a_prepare_that_fails_or_is_stopped_writes_nothing_and_the_next_starts_over(files, tmp_path, monkeypatch):
    d, _ = files
    out = tmp_path / "p"
    real = prep.readers.read

    def stopped(src, column, *a, **k):
        for i, item in enumerate(real(src, column, *a, **k)):
            if i == 50:
                raise KeyboardInterrupt
            yield item
    monkeypatch.setattr(prep.readers, "read", stopped)
    with pytest.raises(KeyboardInterrupt):
        _prep(out, [d / "docs.jsonl"], "byte")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(prep.readers, "read", real)
    # a killed one leaves its partial folder (with a manifest of shards that were never finished): removed
    # and a kill between replacing a corpus and deleting the old one leaves the old one aside: removed too
    partial, aside = tmp_path / ".p.partial", tmp_path / ".del-p-12345"
    for folder in (partial, aside):
        folder.mkdir()
        (folder / "manifest.json").write_text("{}")
    folder, m = _prep(out, [d / "docs.jsonl"], "byte")
    assert not partial.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["p"]
    assert load_corpus(folder).split("train").numel() == m["splits"]["train"]["tokens"]


def test_the_same_prepare_again_is_a_no_op_and_other_settings_need_force(files, tmp_path):
    d, _ = files
    folder, m = _prep(tmp_path / "p", [d / "play.txt"], "byte")
    before = (folder / "manifest.json").stat().st_mtime_ns
    assert _prep(tmp_path / "p", [d / "play.txt"], "byte")[1] == m
    assert (folder / "manifest.json").stat().st_mtime_ns == before
    with pytest.raises(ValueError, match="other settings.*--force"):
        _prep(tmp_path / "p", [d / "play.txt"], "char")
    _, m2 = _prep(tmp_path / "p", [d / "play.txt"], "char", force=True)
    assert m2["tokenizer"] == "char" and load_corpus(folder).vocab.name == "char"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_a_character_only_in_held_out_text_is_refused_by_name(tmp_path):
    (tmp_path / "src").mkdir()
    for i in range(40):
        (tmp_path / "src" / f"{i:02d}.txt").write_text("plain words\n" + ("é" if split_of(0, i, 0.2, 0.2) else ""))
    with pytest.raises(ValueError, match=r"'é' \(U\+00E9\).*--vocab byte"):
        _prep(tmp_path / "p", [tmp_path / "src"], "char", val=0.2, test=0.2)
    assert not (tmp_path / "p").exists()
    folder, m = _prep(tmp_path / "p", [tmp_path / "src"], "byte", val=0.2, test=0.2)
    assert m["splits"]["train"]["documents"] + m["splits"]["val"]["documents"] + m["splits"]["test"]["documents"] == 40
    assert np.asarray(load_corpus(folder).split("val")).dtype == np.uint8


@pytest.mark.parametrize("kind", ["jsonl", "txt"])
def test_characters_of_every_utf8_length_decode_back_to_the_documents(tmp_path, kind):
    """The character ids of mostly-ASCII pieces come from their bytes (multi-byte characters decoded in
    numpy): the same as CharVocab.encode of the text, for 1- to 4-byte characters."""
    rng = random.Random(0)
    docs = ["".join(rng.choice("abc déf ŋ€ 𝄞 日本\n") for _ in range(rng.randint(50, 400))) for _ in range(60)]
    if kind == "jsonl":
        (tmp_path / "s.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    else:
        (tmp_path / "s").mkdir()
        for i, t in enumerate(docs):
            (tmp_path / "s" / f"{i:02d}.txt").write_text(t)
    folder, m = _prep(tmp_path / "p", [tmp_path / ("s.jsonl" if kind == "jsonl" else "s")], "char", val=0.2, test=0.2)
    corpus = load_corpus(folder)
    for k, name in enumerate(("train", "val", "test")):
        text = "\n".join(t for i, t in enumerate(docs) if split_of(0, i, 0.2, 0.2) == k)
        assert torch.equal(corpus.split(name).long(), corpus.vocab.encode(text)), name
    byte, _ = _prep(tmp_path / "b", [tmp_path / ("s.jsonl" if kind == "jsonl" else "s")], "byte", val=0.2, test=0.2)
    assert json.loads((byte / "manifest.json").read_text())["splits"]["val"]["chars"] == m["splits"]["val"]["chars"]
