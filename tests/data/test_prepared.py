"""A prepared folder read back (data/prepared.py): splits that are memory maps of the shards (no copy),
the loaders' rank and resume conventions over them, sizes checked at load, SHA-256 only when asked."""
from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest
import torch

from tfamily.data import load_corpus
from tfamily.data.prepare import PrepareSettings, prepare
from tfamily.data.prepared import load_prepared, verify_prepared
from tfamily.train.tasks.text import TextTask

WORDS = "to be or not that is the question whether tis nobler in mind suffer slings arrows".split()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("prepared")
    rng = random.Random(1)
    src = d / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": " ".join(rng.choices(WORDS, k=rng.randint(20, 200)))}) + "\n"
                           for _ in range(200)))
    out, _ = prepare(PrepareSettings(sources=[str(src)], vocab="bpe:270", out=str(d / "p"), progress=False))
    return out


def _copy(folder, tmp_path):
    import shutil
    shutil.copytree(folder, tmp_path / "c")
    return tmp_path / "c"


def test_splits_are_read_only_maps_of_the_shards(folder):
    corpus = load_prepared(folder)
    m = json.loads((folder / "manifest.json").read_text())
    assert corpus.train.dtype == torch.uint16 and len(corpus.train) == m["splits"]["train"]["tokens"]
    ptr, maps = corpus.train.data_ptr(), open("/proc/self/maps").read().splitlines()
    spans = [[int(a, 16) for a in line.split()[0].split("-")] for line in maps if line.endswith("/train.bin")
             and str(folder) in line]
    assert any(lo <= ptr < hi for lo, hi in spans)  # the tensor's memory is the file's mapping: no copy
    assert all(line.split()[1].startswith("r-") for line in maps if line.endswith("/train.bin"))  # read-only


def _task(folder, **kw):
    cfg = SimpleNamespace(corpus=str(folder), vocab=None, download=False, seq_len=16, eval_split="val",
                          stream=kw.pop("stream", False))
    return TextTask(cfg, kw.pop("batch_size", 4), **kw)


@pytest.mark.parametrize("stream", [False, True])
def test_ranks_draw_disjoint_rows_of_the_one_process_batch_and_resume_bitwise(folder, stream):
    one = _task(folder, batch_size=4, stream=stream, seed=3)
    ranks = [_task(folder, batch_size=2, stream=stream, seed=3, rank=r, world_size=2) for r in range(2)]
    for _ in range(3):
        whole = one.next()["x"]
        assert torch.equal(torch.cat([t.next()["x"] for t in ranks]), whole)
    state = one.state_dict()
    later = [one.next()["x"] for _ in range(2)]
    resumed = _task(folder, batch_size=4, stream=stream, seed=3)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    assert all(torch.equal(resumed.next()["x"], x) for x in later)


def test_evaluation_counts_the_characters_of_exactly_the_scored_tokens(folder):
    task = _task(folder)
    chars = load_prepared(folder).chars("val").long()
    n = sum(b["y"].numel() for b in task.eval_batches(None, 4))
    assert task._scored == (n, int(chars[1:n + 1].sum()))


def test_a_missing_or_truncated_shard_is_found_at_load_and_a_changed_one_by_verify(folder, tmp_path):
    c = _copy(folder, tmp_path)
    assert verify_prepared(c) == []
    with open(c / "val.bin", "r+b") as f:  # same size, one byte changed: only the checksum sees it
        f.seek(3)
        b = f.read(1)
        f.seek(3)
        f.write(bytes([b[0] ^ 1]))
    load_prepared(c)
    assert "val.bin has SHA-256" in verify_prepared(c)[0]
    with pytest.raises(ValueError, match="val.bin has SHA-256.*prepare it again"):
        load_corpus(c, verify=True)
    with open(c / "train.bin", "r+b") as f:
        f.truncate(100)
    with pytest.raises(ValueError, match=r"train.bin is 100 bytes but its manifest says .*truncated"):
        load_prepared(c)
    (c / "test.chars.bin").unlink()
    with pytest.raises(ValueError, match=r"(train.bin is 100 bytes|test.chars.bin is missing)"):
        load_prepared(c)


def test_a_newer_manifest_and_another_vocabulary_are_refused(folder, tmp_path):
    c = _copy(folder, tmp_path)
    with pytest.raises(ValueError, match="data.vocab=char does not match .* bpe:270; drop data.vocab"):
        load_corpus(c, vocab="char")
    from tfamily.data import ByteVocab
    with pytest.raises(ValueError, match="run's vocabulary .*ByteVocab.* not the one"):
        load_corpus(c, vocab=ByteVocab())
    assert load_corpus(c, vocab="bpe:270").vocab.size == 270
    m = json.loads((c / "manifest.json").read_text())
    (c / "manifest.json").write_text(json.dumps({**m, "format_version": 99}))
    with pytest.raises(ValueError, match="format_version 99, newer than this tfamily reads.*upgrade tfamily"):
        load_prepared(c)


def test_a_folder_without_a_manifest_and_an_oversized_raw_text_point_at_prepare(tmp_path, monkeypatch):
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("some text\n" * 20)
    with pytest.raises(ValueError, match="without a manifest.json.*tfamily data prepare"):
        load_corpus(tmp_path / "texts")
    from tfamily.data import corpora
    monkeypatch.setattr(corpora, "RAW_TEXT_BYTES", 100)
    with pytest.raises(ValueError, match=r"too large to read into memory with vocab char.*tfamily data prepare"):
        load_corpus(tmp_path / "texts" / "a.txt", vocab="char")
    assert len(load_corpus(tmp_path / "texts" / "a.txt", vocab="byte").train) > 100  # a byte map has no limit
