"""The writing half of ``tfamily data prepare`` (``prepare.py`` decides what goes where): one token file
per split, and the encoders that fill them. Byte and character ids are table look-ups; subword ids come
from ``Tokenizer.encode_batch`` over many pieces at once, in this process (see ``prepare.py``)."""
from __future__ import annotations

import hashlib
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from . import subword
from .tokenizer import TokenizerVocab
from .vocab import ByteVocab

BATCH_CHARS = 8 << 20  # characters per encode_batch call: enough pieces to keep every thread busy


def _text(piece) -> str:
    return piece if isinstance(piece, str) else piece.decode("utf-8")


class Shard:
    """One split's token file (and, for subword vocabularies, its characters-per-token file)."""

    PENDING = 4  # pieces queued for the writing thread at most (each a few MB)

    def __init__(self, folder: Path, name: str, dtype: np.dtype, chars: bool):
        self.name, self.dtype = name, dtype
        self.f = open(folder / f"{name}.bin", "wb")
        self.cf = open(folder / f"{name}.chars.bin", "wb") if chars else None
        self.h, self.ch = hashlib.sha256(), hashlib.sha256()
        self.tokens = self.chars = self.docs = 0
        # writes and SHA-256 release the GIL: a thread of their own runs them beside the encoding
        self.pool, self.pending = ThreadPoolExecutor(1), deque()

    def write(self, ids: np.ndarray, n_chars: int, counts: np.ndarray | None = None) -> None:
        data = np.ascontiguousarray(ids if ids.dtype == self.dtype else ids.astype(self.dtype))
        c = None if self.cf is None else np.ascontiguousarray(counts, dtype=np.int32)
        self.tokens += len(ids)
        self.chars += n_chars
        while len(self.pending) >= self.PENDING:
            self.pending.popleft().result()
        self.pending.append(self.pool.submit(self._write, data, c))

    def _write(self, data: np.ndarray, counts: np.ndarray | None) -> None:
        buf = memoryview(data).cast("B")
        self.f.write(buf)
        self.h.update(buf)
        if counts is not None:
            c = memoryview(counts).cast("B")
            self.cf.write(c)
            self.ch.update(c)

    def close(self) -> dict:
        """Wait for the writes, sync the files to disk, and return the manifest's entry."""
        while self.pending:
            self.pending.popleft().result()
        self.pool.shutdown()
        entry = {"file": f"{self.name}.bin", "tokens": self.tokens, "chars": self.chars, "documents": self.docs,
                 "sha256": self.h.hexdigest()}
        for f in (self.f, self.cf):
            if f is not None:
                f.flush()
                os.fsync(f.fileno())
                f.close()
        if self.cf is not None:
            entry |= {"chars_file": f"{self.name}.chars.bin", "chars_sha256": self.ch.hexdigest()}
        return entry


class TableEncoder:
    """Byte and character ids: a byte table (``bytes.translate``) for ASCII pieces, a code-point table
    for the rest; every token is one character."""

    _UNKNOWN = 0xFFFFFFFF

    def __init__(self, vocab, shards: list, joiner: np.ndarray):
        self.vocab, self.shards, self.joiner = vocab, shards, joiner
        self.byte = isinstance(vocab, ByteVocab)
        if not self.byte:
            cps = np.array([ord(c) for c in vocab.chars], dtype=np.int64)
            self.table = np.full(max(128, int(cps.max()) + 2), self._UNKNOWN, dtype=np.uint32)
            self.table[cps] = np.arange(len(cps))
            # ASCII characters sort first, so their ids are < 128; 255 marks one not in the vocabulary
            self.ascii = bytes(int(t) if t != self._UNKNOWN else 255 for t in self.table[:128]) + bytes([255]) * 128

    def feed(self, split: int, piece, first: bool, join: bool) -> None:
        shard = self.shards[split]
        if join:
            shard.write(self.joiner, 1)
        if isinstance(piece, str):
            piece = piece.encode("utf-8")
        if self.byte:
            b = np.frombuffer(piece, np.uint8)
            shard.write(b, len(b) if piece.isascii() else len(b) - len(_multibyte(b)[0]) + len(_multibyte(b)[1]))
            return
        out = piece.translate(self.ascii)  # ASCII ids; 255 at every byte >= 0x80 and at an unknown character
        if piece.isascii():
            if b"\xff" in out:
                self._unknown(chr(piece[out.index(b"\xff")]))
            shard.write(np.frombuffer(out, np.uint8), len(out))
            return
        # Mostly ASCII: only the multi-byte characters are decoded (from their bytes, in numpy), then
        # their continuation bytes are dropped, so a few accents do not cost a decode of the whole piece.
        b = np.frombuffer(piece, np.uint8)
        high, lead = _multibyte(b)
        if out.count(b"\xff") != len(high):
            self._unknown(next(chr(c) for c in piece if c < 128 and out[piece.index(c)] == 255))
        cps = _code_points(b, lead)
        found = self.table[np.minimum(cps, len(self.table) - 1)]
        if found.max() == self._UNKNOWN:
            self._unknown(chr(int(cps[np.argmax(found == self._UNKNOWN)])))
        ids = np.frombuffer(out, np.uint8).astype(shard.dtype)
        ids[lead] = found
        keep = np.ones(len(b), bool)
        keep[high] = False
        keep[lead] = True
        ids = ids[keep]
        shard.write(ids, len(ids))

    def _unknown(self, c: str):
        raise ValueError(f"character {c!r} (U+{ord(c):04X}) of the sources is not in the lent "
                         f"{self.vocab.size}-character vocabulary; use --vocab char (the sources' own) or byte")

    def flush(self) -> None:
        pass


def _multibyte(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the bytes >= 0x80 of valid UTF-8 ``b`` (multi-byte characters) and of those that start one."""
    high = np.flatnonzero(b >= 0x80)
    return high, high[b[high] >= 0xC0]


def _code_points(b: np.ndarray, lead: np.ndarray) -> np.ndarray:
    """The code points of the multi-byte characters starting at ``lead`` in valid UTF-8 ``b``."""
    x = [b[np.minimum(lead + i, len(b) - 1)].astype(np.uint32) for i in range(4)]
    two, three = x[0] < 0xE0, x[0] < 0xF0
    return np.where(two, (x[0] & 0x1F) << 6 | x[1] & 0x3F,
                    np.where(three, (x[0] & 0x0F) << 12 | (x[1] & 0x3F) << 6 | x[2] & 0x3F,
                             (x[0] & 0x07) << 18 | (x[1] & 0x3F) << 12 | (x[2] & 0x3F) << 6 | x[3] & 0x3F))


class BpeEncoder:
    """Subword ids through ``encode_batch`` over many pieces at once (the library's threads), pieces
    cut as ``subword.chunks`` cuts a text; validation and test keep their characters per token."""

    def __init__(self, vocab: TokenizerVocab, shards: list, joiner: np.ndarray):
        self.vocab, self.shards, self.joiner = vocab, shards, joiner
        self.items: list = []  # (split, text or None: a joiner)
        self.pending = 0
        self.buf, self.at, self.split = "", 0, 0

    def feed(self, split: int, piece, first: bool, join: bool) -> None:
        if first:
            self._end_document()
            self.split = split
            if join:
                self.items.append((split, None))
        self._add(piece)

    def _add(self, piece) -> None:
        self.buf = self.buf[self.at:] + _text(piece)
        self.at = 0
        while len(self.buf) - self.at > subword.CHUNK:
            end = self.buf.find("\n", self.at + subword.CHUNK)
            if end < 0:
                break
            self._emit(self.buf[self.at:end + 1])
            self.at = end + 1

    def _end_document(self) -> None:
        if len(self.buf) > self.at:
            self._emit(self.buf[self.at:])
        self.buf, self.at = "", 0

    def _emit(self, text: str) -> None:
        self.items.append((self.split, text))
        self.pending += len(text)
        if self.pending >= BATCH_CHARS:
            self._encode()

    def flush(self) -> None:
        self._end_document()
        self._encode()

    def _encode(self) -> None:
        items, self.items, self.pending = self.items, [], 0
        for split, heldout in ((0, False), (1, True), (2, True)):
            mine = [t for s, t in items if s == split]
            texts = [t for t in mine if t is not None]
            if not mine:
                continue
            encs = iter(self.vocab.encode_batch(texts, offsets=heldout))
            shard = self.shards[split]
            for text in mine:
                if text is None:
                    shard.write(self.joiner, 1, _joiner_counts(self.joiner) if heldout else None)
                    continue
                enc = next(encs)
                ids = np.array(enc.ids, dtype=np.uint32)
                if len(ids):
                    shard.write(ids, len(text), subword.char_counts(enc.offsets, len(text)) if heldout else None)
                else:
                    shard.chars += len(text)


def _joiner_counts(joiner: np.ndarray) -> np.ndarray:
    counts = np.zeros(len(joiner), np.int32)
    counts[0] = 1
    return counts


def joiner(vocab) -> tuple[np.ndarray, str]:
    if isinstance(vocab, TokenizerVocab):
        eot = vocab.end_of_text_id()
        if eot is not None:
            return np.array([eot], np.uint32), vocab.decode([eot])
        return vocab.encode_array("\n").astype(np.uint32), "\n"
    return vocab.encode_array("\n").astype(np.uint32), "\n"
