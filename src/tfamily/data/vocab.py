"""Byte and character vocabularies for character-level language modelling.

Both vocabularies map text to integer ids and back, expose `size` (number of
ids) and `name`, and serialise to a small JSON-able dict so a checkpoint can
store the exact vocabulary it was trained with (`vocab_from_json` restores it).

`encode` returns a 1-D `torch.long` tensor (what an embedding layer wants);
`encode_array` returns the compact numpy array that corpora keep in memory
(`uint8` when every id fits in a byte, else `int32`).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ..base.numbers import cut
from .ids import check_range, ids_to_numpy
from .tokenizer import TokenizerVocab

__all__ = ["ByteVocab", "CharVocab", "OutsideVocabulary", "vocab_from_json"]


class ByteVocab:
    """The 256 byte values; text is encoded as UTF-8 bytes.

    Lossless for any text; `decode` uses errors='replace' because a window of
    bytes cut from a corpus may split a multi-byte character.
    """

    name = "byte"
    size = 256

    def encode_array(self, text: str | bytes | bytearray | memoryview) -> np.ndarray:
        """Text or raw bytes -> (n,) uint8 array (a fresh, writable copy)."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        if not isinstance(text, (bytes, bytearray, memoryview)):
            raise TypeError(f"ByteVocab.encode takes str or bytes, got {type(text).__name__}")
        return np.frombuffer(bytes(text), dtype=np.uint8).copy()

    def encode(self, text: str | bytes | bytearray | memoryview) -> torch.Tensor:
        """Text or raw bytes -> (n,) long tensor of byte values."""
        return torch.from_numpy(self.encode_array(text)).long()

    def decode(self, ids: Any) -> str:
        """(n,) ids -> str; invalid UTF-8 becomes U+FFFD instead of raising."""
        arr = ids_to_numpy(ids)
        check_range(arr, self.size, "byte")
        return arr.astype(np.uint8).tobytes().decode("utf-8", errors="replace")

    def to_json(self) -> dict:
        return {"type": "byte"}

    @classmethod
    def from_json(cls, d: dict) -> "ByteVocab":
        if not isinstance(d, dict) or d.get("type") != "byte":
            raise ValueError(f"not a byte vocabulary: {cut(d)}; expected {{'type': 'byte'}}")
        return cls()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByteVocab)

    def __hash__(self) -> int:
        return hash("byte")

    def __repr__(self) -> str:
        return "ByteVocab(size=256)"


class OutsideVocabulary(ValueError):
    """Text holds characters a ``CharVocab`` lacks: ``char`` the first (at character ``index`` of the
    text), ``count`` of them in all; a reader that knows the text's file names it (``tfamily eval --data``)."""

    def __init__(self, char: str, index: int, count: int, size: int):
        self.char, self.index, self.count, self.size = char, index, count, size
        more = f"; {count:,} characters of the text are outside it, the first at character {index:,}" \
            if count > 1 else ""
        super().__init__(f"character {char!r} (U+{ord(char):04X}) is not in this {size}-character vocabulary{more}; "
                         f"build the vocabulary from a text that contains it, or use ByteVocab")


class CharVocab:
    """Sorted unique characters of a text; id i is the i-th character.

    Build with `CharVocab.from_text(text)`. Tiny Shakespeare gives the usual
    65 characters. Encoding a character that is not in the vocabulary raises
    ValueError naming it: silently mapping it to some id would corrupt data.
    """

    name = "char"

    def __init__(self, chars: Iterable[str]):
        chars = list(chars)
        for c in chars:
            if not isinstance(c, str) or len(c) != 1:
                raise ValueError(f"CharVocab needs single characters, got {c!r}")
        if len(set(chars)) != len(chars):
            raise ValueError("CharVocab characters must be unique; pass sorted(set(text)) or use from_text")
        if not chars:
            raise ValueError("CharVocab needs at least one character; the text was empty")
        self.chars: tuple[str, ...] = tuple(chars)
        self.size = len(self.chars)
        self._index = {c: i for i, c in enumerate(self.chars)}
        # Sorted code points and their ids make encoding one searchsorted call
        # instead of a Python loop (text8-sized texts have 1e8 characters).
        cps = np.array([ord(c) for c in self.chars], dtype=np.uint32)
        order = np.argsort(cps)
        self._sorted_cps = cps[order]
        self._sorted_ids = order.astype(np.int64)

    @classmethod
    def from_text(cls, text: str) -> "CharVocab":
        """Vocabulary of the sorted unique characters of `text`."""
        if not isinstance(text, str):
            raise TypeError(f"CharVocab.from_text takes str, got {type(text).__name__}; decode bytes as UTF-8 first")
        cps = np.unique(_code_points(text))
        return cls(chr(int(c)) for c in cps)

    @property
    def dtype(self) -> np.dtype:
        """Smallest numpy dtype that holds every id."""
        return np.dtype(np.uint8) if self.size <= 256 else np.dtype(np.int32)

    def encode_array(self, text: str) -> np.ndarray:
        """Text -> (n,) array of ids (uint8 if size <= 256, else int32)."""
        if not isinstance(text, str):
            raise TypeError(f"CharVocab.encode takes str, got {type(text).__name__}")
        cps = _code_points(text)
        pos = np.searchsorted(self._sorted_cps, cps)
        pos_c = np.minimum(pos, self.size - 1)
        known = self._sorted_cps[pos_c] == cps
        if not known.all():
            first = int(np.argmin(known))
            raise OutsideVocabulary(chr(int(cps[first])), first, int((~known).sum()), self.size)
        return self._sorted_ids[pos_c].astype(self.dtype)

    def encode(self, text: str) -> torch.Tensor:
        """Text -> (n,) long tensor of ids."""
        return torch.from_numpy(self.encode_array(text)).long()

    def decode(self, ids: Any) -> str:
        """(n,) ids -> str."""
        arr = ids_to_numpy(ids)
        check_range(arr, self.size, "char")
        return "".join(self.chars[i] for i in arr.tolist())

    def to_json(self) -> dict:
        return {"type": "char", "chars": "".join(self.chars)}

    @classmethod
    def from_json(cls, d: dict) -> "CharVocab":
        if not isinstance(d, dict) or d.get("type") != "char" or not isinstance(d.get("chars"), str):
            raise ValueError(f"not a char vocabulary: {cut(d)}; expected {{'type': 'char', 'chars': '...'}}")
        return cls(d["chars"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharVocab) and other.chars == self.chars

    def __hash__(self) -> int:
        return hash(self.chars)

    def __repr__(self) -> str:
        return f"CharVocab(size={self.size})"


def _code_points(text: str) -> np.ndarray:
    # UTF-32-LE is one uint32 per code point, so numpy sees characters, not bytes.
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def vocab_from_json(d: dict):
    """Rebuild a vocabulary from its `to_json()` dict."""
    kinds = {"byte": ByteVocab, "char": CharVocab, "tokenizer": TokenizerVocab}
    kind = d.get("type") if isinstance(d, dict) else None
    if not isinstance(kind, str) or kind not in kinds:
        raise ValueError(f"unknown vocabulary {cut(d)}; expected a dict with 'type' in {sorted(kinds)}")
    return kinds[kind].from_json(d)
