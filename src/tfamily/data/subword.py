"""Subword corpora: ``data.vocab=bpe:N`` trains a byte-level BPE of N tokens with Hugging
Face's ``tokenizers`` on a corpus's training split (once: the result is cached per training
text and size), and any ``tokenizer.json`` vocabulary (a pretrained model's) reads the splits.

The file is cut where the byte vocabulary cuts it (each cut moved back to the start of a
character), and each split is tokenised on its own, so no token spans two splits and every
vocabulary scores the same text. Each token also carries the number of characters of the text
it stands for (a character split over two byte-level tokens counts with the first), so that
bits per character are total nats over total characters whatever the vocabulary
(``bits_per_char``).
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

from ..base.files import write_atomic
from .paths import cache_dir
from ..base.textload import read_cache
from .tokenizer import TOKENIZER_BYTES, TokenizerVocab
from ..settings.vocab_names import DEFAULT_SIZE, MAX_SIZE, MIN_SIZE, bpe_size  # noqa: F401 (this module's API)

CHUNK = 1 << 20  # characters per encoding call, cut after a newline


def bits_per_char(total_nats: float, chars: int) -> float:
    """Total nats over the characters of the text they scored, in bits per character."""
    if chars <= 0:
        raise ValueError(f"bits per character need at least one scored character, got {chars}")
    return total_nats / chars / math.log(2)


def train_bpe(text: str, size: int) -> TokenizerVocab:
    """A byte-level BPE of ``size`` tokens trained on ``text``; cached in the user cache
    (``bpe/<sha256 of text>-<size>.json``), so a corpus trains it once per machine."""
    import tokenizers
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]
    path = cache_dir() / "bpe" / f"{key}-{size}-tokenizers{tokenizers.__version__}.json"
    cached = read_cache(path, TokenizerVocab, "BPE tokenizer", TOKENIZER_BYTES)
    if cached is not None:
        return cached
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_chunks(text), trainer)
    vocab = TokenizerVocab(tok.to_str())
    try:  # written whole then renamed: a reader never sees half a file
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, vocab.json)
    except OSError:
        pass  # an unwritable cache costs a retraining next time, nothing else
    return vocab


def _chunks(text: str) -> list[str]:
    """``text`` in pieces of about CHUNK characters, each ending after a newline."""
    out, start = [], 0
    while start < len(text):
        end = text.find("\n", start + CHUNK)
        end = len(text) if end < 0 else end + 1
        out.append(text[start:end])
        start = end
    return out


def encode(vocab: TokenizerVocab, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids, chars): the tokens of ``text`` and the characters each stands for (summing to len(text))."""
    ids, chars = [], []
    for piece in _chunks(text):
        enc = vocab.encode_full(piece)
        if not enc.ids:
            continue
        ids.append(np.asarray(enc.ids, dtype=np.int32))
        chars.append(char_counts(enc.offsets, len(piece)))
    if not ids:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    return np.concatenate(ids), np.concatenate(chars)


def char_counts(offsets: list, n_chars: int) -> np.ndarray:
    """(n,) int32: the characters each of a piece's n tokens stands for, from their (start, end)
    character offsets: a character split over two byte-level tokens counts with the first, and text
    no token covers (trailing) with the last, so the counts sum to ``n_chars``."""
    ends = np.maximum.accumulate(np.array([e for _, e in offsets], dtype=np.int64))
    counts = np.diff(ends, prepend=0)
    counts[-1] += n_chars - ends[-1]
    return counts.astype(np.int32)


def split_text(raw: np.ndarray, sizes: list[int], path) -> list[str]:
    """The byte array ``raw`` cut into parts of ``sizes`` bytes (the byte vocabulary's split), each
    cut moved back to the start of a UTF-8 character, decoded."""
    bounds = [0]
    for b in np.cumsum(sizes).tolist():
        b = min(b, len(raw))
        while 0 < b < len(raw) and raw[b] & 0xC0 == 0x80:  # a continuation byte: inside a character
            b -= 1
        bounds.append(b)
    try:
        return [raw[a:b].tobytes().decode("utf-8") for a, b in zip(bounds, bounds[1:])]
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not valid UTF-8 ({e.reason}); a subword vocabulary reads text: use "
                         f"data.vocab=byte for arbitrary bytes") from e
