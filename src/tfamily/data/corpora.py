"""Text corpora as one token tensor per split.

`load_corpus(name_or_path)` returns a `Corpus` whose `train`, `val` and
`test` are 1-D uint8 (or int32, for character vocabularies larger than 256)
tensors that are slices of one tensor: batching indexes them directly, so no
batch ever copies the corpus. Plain files under the byte vocabulary are
memory-mapped copy-on-write, so enwik8 costs no load time and no RAM until
read; gzip files and character vocabularies are decoded once and kept in a
per-process cache.

| name            | file                | split (train/val/test)          | default vocab |
|-----------------|---------------------|---------------------------------|---------------|
| tinyshakespeare | tinyshakespeare.txt | first 90% / last 10% / = val    | char (65)     |
| kjv             | kjv.txt             | 90% / 5% / 5%                   | byte          |
| gcide           | gcide.txt.gz        | 90% / 5% / 5% of the text       | byte          |
| enwik8          | enwik8              | 90e6 / 5e6 / 5e6 bytes          | byte          |
| text8           | text8               | 90e6 / 5e6 / 5e6 characters     | byte          |
| any path        | a UTF-8 text file   | 90% / 5% / 5%                   | byte          |
| a folder        | `tfamily data prepare`'s shards, memory-mapped (prepared.py) | as prepared | as prepared |

A char or subword vocabulary (and a gzip file) decodes the whole text into memory, so such files are
read up to ``RAW_TEXT_BYTES``; a larger one is pointed at ``tfamily data prepare`` in one line.

Any corpus also reads as byte-level BPE (``vocab='bpe:N'``, trained on its training split) or
through a ``tokenizer.json`` vocabulary: ``subword.py``, which also gives each token the number
of characters it stands for (``Corpus.chars``), so bits per character stay comparable.
"""
from __future__ import annotations

import gzip
import json
import os
import urllib.error
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from . import subword
from .corpus import Corpus
from .download import ChecksumError, md5_file, verify_file
from .download import download as download_dataset
from .paths import DataNotFoundError, find_file
from .sources import DATASETS, GCIDE_TEXT_MD5, OFFLINE_FILES
from .tokenizer import TokenizerVocab
from .vocab import ByteVocab, CharVocab

__all__ = ["Corpus", "CorpusSpec", "CORPORA", "load_corpus", "clear_corpus_cache"]


class CorpusSpec(NamedTuple):
    """How to read one named corpus.

    split: fractions (train, val, test), or (train, val) meaning test = val,
    or exact token counts as ints (the file must then have exactly their sum).
    """

    filename: str
    split: tuple
    vocab: str  # the default: "byte" or "char"
    gzip: bool = False


CORPORA: dict[str, CorpusSpec] = {
    # Karpathy's char-rnn / nanoGPT convention: the validation loss that
    # character-level baselines report is on the last 10%; there is no test split.
    "tinyshakespeare": CorpusSpec("tinyshakespeare.txt", (0.9, 0.1), "char"),
    "kjv": CorpusSpec("kjv.txt", (0.9, 0.05, 0.05), "byte"),
    "gcide": CorpusSpec("gcide.txt.gz", (0.9, 0.05, 0.05), "byte", gzip=True),
    # Hutter-prize convention used by Transformer-XL and others.
    "enwik8": CorpusSpec("enwik8", (90_000_000, 5_000_000, 5_000_000), "byte"),
    "text8": CorpusSpec("text8", (90_000_000, 5_000_000, 5_000_000), "byte"),
}
_PATH_SPLIT = (0.9, 0.05, 0.05)


_CACHE: dict[tuple, Corpus] = {}


def clear_corpus_cache() -> None:
    """Forget every corpus loaded in this process."""
    _CACHE.clear()


def load_corpus(
    name_or_path: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    *,
    vocab: str | ByteVocab | CharVocab | None = None,
    download: bool = False,
    verify: bool = False,
) -> Corpus:
    """Load a named corpus (see the module table) or a UTF-8 text file by path.

    A string in CORPORA always means that corpus; to read a local file of the
    same name pass a Path or a path with a directory ('./kjv'). Text files
    ending in .gz are decompressed.

    vocab:    'byte', 'char' (sorted unique characters of the whole file), a
              vocabulary object (e.g. restored from a checkpoint with
              `vocab_from_json`), or None for the corpus default.
    download: when a downloadable corpus is missing, fetch it (needs network);
              without it a missing file raises DataNotFoundError.
    verify:   check the file's md5 (or size) against the known digest first.
    """
    if not (isinstance(name_or_path, str) and name_or_path in CORPORA) and isinstance(name_or_path, (str, os.PathLike)) \
            and Path(name_or_path).expanduser().is_dir():
        from .prepared import load_prepared  # a folder: a prepared corpus, memory-mapped (prepared.py)
        return load_prepared(Path(name_or_path).expanduser(), vocab=vocab, verify=verify)
    name, path, spec = _locate(name_or_path, data_dir, download)
    vocab = spec.vocab if vocab is None else vocab
    if vocab != "byte" and not isinstance(vocab, ByteVocab) or spec.gzip:
        _check_raw_size(path, vocab, spec.gzip)
    if isinstance(vocab, (ByteVocab, CharVocab, TokenizerVocab)):
        vocab_key = json.dumps(vocab.to_json())
    elif vocab in ("byte", "char") or subword.bpe_size(vocab):
        vocab_key = vocab
    else:
        raise ValueError(f"vocab={vocab!r} is not valid; use 'byte', 'char', 'bpe:N' or a "
                         f"ByteVocab/CharVocab/TokenizerVocab object")
    st = path.stat()
    key = (name, str(path.resolve()), st.st_size, st.st_mtime_ns, vocab_key)
    if verify:
        _verify(name, path)
    if key not in _CACHE and (isinstance(vocab, TokenizerVocab) or subword.bpe_size(vocab)):
        _CACHE[key] = _read_subword(name, path, spec, vocab)
    if key not in _CACHE:
        data, vocab_obj = _read_tokens(path, spec.gzip, vocab)
        train, val, test = _split(data, spec.split, name, path)
        _CACHE[key] = Corpus(name, vocab_obj, train, val, test, path)
    return _CACHE[key]


RAW_TEXT_BYTES = 1 << 30  # a char or subword corpus (or a gzip file) read whole into memory: at most this


def _check_raw_size(path: Path, vocab, gz: bool) -> None:
    """A file the in-memory path would decode whole (several times its size in memory) is pointed at
    ``tfamily data prepare``, whose folder is read through memory maps."""
    size = path.stat().st_size * (4 if gz else 1)  # a gzip file decompresses to several times its size
    if size > RAW_TEXT_BYTES:
        kind = vocab if isinstance(vocab, str) else vocab.name
        raise ValueError(f"data.corpus={path} ({path.stat().st_size / 1e9:.1f} GB{', gzip' if gz else ''}) is too large to "
                         f"read into memory with vocab {kind} (up to {RAW_TEXT_BYTES >> 20} MiB); prepare it once: "
                         f"`tfamily data prepare {path} --vocab {kind if isinstance(vocab, str) else 'RUN_DIR'} --out DIR` "
                         f"and set data.corpus=DIR")


def _locate(name_or_path, data_dir, want_download: bool) -> tuple[str, Path, CorpusSpec]:
    """(name, file path, spec) for a corpus name or a file path."""
    if isinstance(name_or_path, str) and name_or_path in CORPORA:
        spec = CORPORA[name_or_path]
        try:
            return name_or_path, find_file(spec.filename, data_dir), spec
        except DataNotFoundError as err:
            if not (want_download and name_or_path in DATASETS):
                raise
            try:
                return name_or_path, download_dataset(name_or_path, data_dir), spec
            except (urllib.error.URLError, OSError) as e:
                url = DATASETS[name_or_path].url
                raise DataNotFoundError(err.name, err.searched, f"downloading {url} failed ({e}); retry when online") from e
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"load_corpus takes a corpus name or a path, got {type(name_or_path).__name__}")
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path.name, path, CorpusSpec(path.name, _PATH_SPLIT, "byte", gzip=path.suffix == ".gz")
    if isinstance(name_or_path, str) and "/" not in name_or_path and os.sep not in name_or_path and "." not in name_or_path:
        raise ValueError(f"unknown corpus {name_or_path!r}; known corpora are {sorted(CORPORA)}, or pass a file path")
    if path.exists():
        raise ValueError(f"{path} is not a regular file; pass a UTF-8 text file")
    raise FileNotFoundError(f"corpus file {path} does not exist")


def _read_bytes(path: Path, gz: bool) -> np.ndarray:
    """The file's (decompressed) bytes as a writable (n,) uint8 array."""
    if gz:
        buf = bytearray()
        try:
            with gzip.open(path, "rb") as f:
                while chunk := f.read(1 << 24):
                    buf += chunk
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise ValueError(f"{path} is not a readable gzip file ({e}): it is corrupt or truncated; "
                             f"replace it (for a named corpus: delete it and run `tfamily download`)") from e
        return np.frombuffer(buf, dtype=np.uint8)
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=np.uint8)
    # Copy-on-write map: pages load lazily and writes never reach the file.
    return np.memmap(path, dtype=np.uint8, mode="c")


def _read_tokens(path: Path, gz: bool, vocab) -> tuple[torch.Tensor, ByteVocab | CharVocab]:
    raw = _read_bytes(path, gz)
    if len(raw) == 0:
        raise ValueError(f"corpus file {path} is empty; pass a UTF-8 text file with some text in it")
    if vocab == "byte" or isinstance(vocab, ByteVocab):
        return torch.from_numpy(raw), ByteVocab() if vocab == "byte" else vocab
    try:
        text = raw.tobytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{path} is not valid UTF-8 at byte {e.start} ({e.reason}); use vocab='byte' for arbitrary bytes"
        ) from e
    vocab_obj = CharVocab.from_text(text) if vocab == "char" else vocab
    return torch.from_numpy(vocab_obj.encode_array(text)), vocab_obj


def _read_subword(name: str, path: Path, spec: CorpusSpec, vocab) -> Corpus:
    """The splits cut as the byte vocabulary cuts them, each tokenised on its own (subword.py)."""
    raw = np.asarray(_read_bytes(path, spec.gzip))
    if len(raw) == 0:
        raise ValueError(f"corpus file {path} is empty; pass a UTF-8 text file with some text in it")
    parts = _split(torch.from_numpy(raw), spec.split, name, path)
    texts = subword.split_text(raw, [len(p) for p in parts[: 2 if parts[2] is parts[1] else 3]], path)
    if not isinstance(vocab, TokenizerVocab):
        vocab = subword.train_bpe(texts[0], subword.bpe_size(vocab))
    encoded = [subword.encode(vocab, t) for t in texts]
    ids = torch.from_numpy(np.concatenate([e[0] for e in encoded]))
    chars = torch.from_numpy(np.concatenate([e[1] for e in encoded]))
    bounds = np.cumsum([0] + [len(e[0]) for e in encoded])
    cut = [slice(a, b) for a, b in zip(bounds, bounds[1:])]
    if any(s.stop - s.start < 2 for s in cut):
        raise ValueError(f"{path} is too small to split into tokens of {vocab!r}; use a longer text")
    splits, counts = [ids[s] for s in cut], [chars[s] for s in cut]
    if len(cut) == 2:  # test = val
        splits, counts = splits + splits[1:], counts + counts[1:]
    return Corpus(name, vocab, *splits, path, counts=tuple(counts))


def _split(data: torch.Tensor, split: tuple, name: str, path: Path) -> tuple[torch.Tensor, ...]:
    """Cut `data` into (train, val, test) views; a 2-tuple split means test = val."""
    n = len(data)
    if all(isinstance(s, int) for s in split):
        if n != sum(split):
            raise ValueError(
                f"{path} has {n:,} tokens but {name} must have exactly {sum(split):,}; "
                f"the file is truncated or not {name}: delete it and run `tfamily download {name}`"
            )
        sizes = list(split)
    else:
        sizes = [int(n * f) for f in split[:-1]]
        sizes.append(n - sum(sizes))
    bounds = np.cumsum([0] + sizes)
    parts = [data[bounds[i] : bounds[i + 1]] for i in range(len(sizes))]
    if any(len(p) < 2 for p in parts):
        raise ValueError(f"{path} is too small to split ({n} tokens into {sizes}); use a longer text")
    return (parts[0], parts[1], parts[1] if len(parts) == 2 else parts[2])


def _verify(name: str, path: Path) -> None:
    """Check `path` against the known md5 (or size) for its corpus; unknown files pass."""
    if name == "gcide":
        got = md5_file(path, gunzip=True)
        if got != GCIDE_TEXT_MD5:
            raise ChecksumError(f"{path} (decompressed)", "md5", GCIDE_TEXT_MD5, got)
        return
    ds = DATASETS.get(name)
    if ds is not None:
        md5, size = ds.md5, ds.size
    elif path.name in OFFLINE_FILES:
        md5, size = OFFLINE_FILES[path.name][0], None
    else:
        return
    verify_file(path, md5=md5, size=size)
