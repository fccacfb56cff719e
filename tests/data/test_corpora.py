import hashlib
import zipfile

import pytest
import torch

from tfamily.data.corpora import CORPORA, CorpusSpec, load_corpus
from tfamily.data.download import ChecksumError
from tfamily.data.paths import DataNotFoundError
from tfamily.data.sources import DATASETS, Dataset
from tfamily.data.vocab import ByteVocab, CharVocab, vocab_from_json


def shares_storage(*tensors):
    ptrs = {t.untyped_storage().data_ptr() for t in tensors}
    return len(ptrs) == 1


def split_sizes(n, fractions=(0.9, 0.05)):
    train, val = int(n * fractions[0]), int(n * fractions[1])
    return train, val, n - train - val


def test_tinyshakespeare_char_split(shared_data):
    path = shared_data("tinyshakespeare.txt")
    c = load_corpus("tinyshakespeare", path.parent)
    assert isinstance(c.vocab, CharVocab) and c.vocab.size == 65
    assert c.name == "tinyshakespeare"
    assert len(c.train) == int(1_115_394 * 0.9) == 1_003_854
    assert len(c.val) == 1_115_394 - 1_003_854
    assert c.test is c.val  # the char-rnn convention has no separate test split
    assert c.train.dtype == torch.uint8
    assert shares_storage(c.train, c.val)
    assert c.vocab.decode(c.train[:14]) == "First Citizen:"
    # Contiguous: the validation split starts right where train ends.
    text = path.read_text()
    assert c.vocab.decode(c.val[:50]) == text[1_003_854:1_003_904]
    assert load_corpus("tinyshakespeare", path.parent) is c  # cached


def test_tinyshakespeare_byte_vocab_and_vocab_object(shared_data):
    d = shared_data("tinyshakespeare.txt").parent
    b = load_corpus("tinyshakespeare", d, vocab="byte")
    assert isinstance(b.vocab, ByteVocab) and len(b.train) == 1_003_854
    c = load_corpus("tinyshakespeare", d)
    restored = vocab_from_json(c.vocab.to_json())
    again = load_corpus("tinyshakespeare", d, vocab=restored)
    assert torch.equal(again.val, c.val)


def test_kjv_split(shared_data):
    path = shared_data("kjv.txt")
    c = load_corpus("kjv", path.parent, verify=True)
    n = 4_298_239
    assert (len(c.train), len(c.val), len(c.test)) == split_sizes(n)
    assert isinstance(c.vocab, ByteVocab)
    assert shares_storage(c.train, c.val, c.test)
    assert bytes(c.test[-20:].numpy()) == path.read_bytes()[-20:]


def test_gcide_split_reads_gzip(shared_data):
    path = shared_data("gcide.txt.gz")
    c = load_corpus("gcide", path.parent)
    n = 39_952_321
    assert (len(c.train), len(c.val), len(c.test)) == split_sizes(n)
    assert c.vocab.decode(c.train[:17]) == "\n\n00-database-url"
    assert shares_storage(c.train, c.val, c.test)


@pytest.mark.parametrize("name", ["enwik8", "text8"])
def test_hutter_splits_are_exact_byte_counts(tmp_path, name):
    with open(tmp_path / name, "wb") as f:
        f.truncate(100_000_000)  # sparse: costs no disk or time
    c = load_corpus(name, tmp_path)
    assert (len(c.train), len(c.val), len(c.test)) == (90_000_000, 5_000_000, 5_000_000)
    assert isinstance(c.vocab, ByteVocab)
    assert shares_storage(c.train, c.val, c.test)


def test_enwik8_wrong_size_is_refused(tmp_path):
    (tmp_path / "enwik8").write_bytes(b"x" * 1000)
    with pytest.raises(ValueError, match="exactly 100,000,000.*tfamily download enwik8"):
        load_corpus("enwik8", tmp_path)


def test_text_file_by_path(tmp_path):
    text = "To be, or not to be, that is the question: ✓\n" * 100
    path = tmp_path / "hamlet.txt"
    path.write_text(text, encoding="utf-8")
    c = load_corpus(path)
    n = len(text.encode("utf-8"))
    assert c.name == "hamlet.txt"
    assert (len(c.train), len(c.val), len(c.test)) == split_sizes(n)
    assert c.vocab.decode(torch.cat([c.train, c.val, c.test])) == text
    ch = load_corpus(str(path), vocab="char")
    assert isinstance(ch.vocab, CharVocab) and ch.vocab.size == len(set(text))
    assert ch.vocab.decode(torch.cat([ch.train, ch.val, ch.test])) == text


def test_path_errors(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("café".encode("latin-1") * 100)
    with pytest.raises(ValueError, match="not valid UTF-8"):
        load_corpus(bad, vocab="char")
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("abc")
    with pytest.raises(ValueError, match="too small"):
        load_corpus(tiny)
    with pytest.raises(FileNotFoundError):
        load_corpus(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="unknown corpus 'shakespeare'.*tinyshakespeare"):
        load_corpus("shakespeare")
    with pytest.raises(ValueError, match="vocab='wordpiece'"):
        load_corpus("tinyshakespeare", vocab="wordpiece")
    with pytest.raises(ValueError, match="vocab='bpe:12': the BPE size"):
        load_corpus("tinyshakespeare", vocab="bpe:12")


def test_missing_named_corpus_names_searched_paths(tmp_path, monkeypatch):
    monkeypatch.delenv("TFAMILY_DATA", raising=False)
    with pytest.raises(DataNotFoundError) as info:
        load_corpus("kjv", tmp_path)
    assert str(tmp_path / "kjv.txt") in str(info.value)


def test_verify_detects_a_tampered_file(tmp_path, monkeypatch):
    monkeypatch.delenv("TFAMILY_DATA", raising=False)
    (tmp_path / "kjv.txt").write_text("In the beginning\n" * 100)
    with pytest.raises(ChecksumError, match="9e9193c67cd125623629a76133c71e3c"):
        load_corpus("kjv", tmp_path, verify=True)


def _fake_corpus(tmp_path, monkeypatch, content, url=None):
    archive = tmp_path / "fake.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("fake.txt", content)
    monkeypatch.setitem(DATASETS, "fakecorpus", Dataset(url or archive.as_uri(), "fake.txt",
                                                        hashlib.md5(content).hexdigest(), member="fake.txt"))
    monkeypatch.setitem(CORPORA, "fakecorpus", CorpusSpec("fake.txt", (0.9, 0.05, 0.05), "byte"))


def test_download_true_fetches_a_missing_corpus(tmp_path, monkeypatch):
    monkeypatch.delenv("TFAMILY_DATA", raising=False)
    content = b"abcdefghij" * 100
    _fake_corpus(tmp_path, monkeypatch, content)
    data = tmp_path / "data"
    with pytest.raises(DataNotFoundError, match="tfamily download fakecorpus"):
        load_corpus("fakecorpus", data)
    c = load_corpus("fakecorpus", data, download=True)
    assert bytes(torch.cat([c.train, c.val, c.test]).numpy()) == content
    assert (data / "fake.txt").is_file()


def test_download_true_offline_gives_data_not_found(tmp_path, monkeypatch):
    monkeypatch.delenv("TFAMILY_DATA", raising=False)
    _fake_corpus(tmp_path, monkeypatch, b"x" * 100, url=(tmp_path / "gone.zip").as_uri())
    with pytest.raises(DataNotFoundError, match="failed"):
        load_corpus("fakecorpus", tmp_path / "data", download=True)
