"""A subword vocabulary read from a Hugging Face ``tokenizer.json`` (the ``tokenizers``
library), so a model imported with ``tfamily convert`` encodes and decodes text as it was
trained to. Serialised whole into the checkpoint's meta.json, like the other vocabularies."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from .ids import check_range, ids_to_numpy


TOKENIZER_BYTES = 128 << 20  # the largest published tokenizer.json files are a few tens of MB
END_OF_TEXT = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>")  # the tokens documents end with, in order


def read_tokenizer(path: str | Path) -> TokenizerVocab:
    """The vocabulary of the ``tokenizer.json`` at ``path``, read through the bounded loader; a
    corrupt one is one line naming the file."""
    from ..base.textload import load_json, read_text
    text = read_text(path, TOKENIZER_BYTES)
    load_json(text, str(path), TOKENIZER_BYTES)  # the depth bound, before the tokenizers parser sees it
    try:
        return TokenizerVocab(text)
    except ValueError as e:
        raise ValueError(f"{path} is {e}") from e


class TokenizerVocab:
    name = "tokenizer"

    def __init__(self, spec: str):
        try:
            from tokenizers import Tokenizer
        except ImportError as e:
            raise ImportError("a tokenizer.json vocabulary needs the tokenizers package: pip install tokenizers") from e
        if not isinstance(spec, str):
            raise TypeError(f"TokenizerVocab takes the text of a tokenizer.json, got {type(spec).__name__}")
        try:
            self._tok = Tokenizer.from_str(spec)
        except Exception as e:  # tokenizers raises its own exception type for a malformed file
            raise ValueError(f"not a valid tokenizer.json ({str(e)[:200]}); save it again with the tokenizer's "
                             f"save_pretrained") from e
        self.json = spec
        self.size = self._tok.get_vocab_size(with_added_tokens=True)

    def encode_array(self, text: str) -> np.ndarray:
        """Text -> (n,) int32 ids, without special tokens added."""
        if not isinstance(text, str):
            raise TypeError(f"TokenizerVocab.encode takes str, got {type(text).__name__}")
        return np.asarray(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.int32)

    def encode_full(self, text: str):
        """The ``tokenizers.Encoding`` of ``text`` (ids and character offsets), no special tokens added."""
        return self._tok.encode(text, add_special_tokens=False)

    def encode_batch(self, texts: list[str], offsets: bool = True) -> list:
        """The ``tokenizers.Encoding`` of each text, no special tokens added, encoded in parallel by the
        library's threads; ``offsets=False`` skips the character offsets (``encode_batch_fast``)."""
        if offsets:
            return self._tok.encode_batch(texts, add_special_tokens=False)
        return self._tok.encode_batch_fast(texts, add_special_tokens=False)

    def end_of_text_id(self) -> int | None:
        """The id of the tokenizer's end-of-text token (GPT-2's ``<|endoftext|>``, ``</s>``), if it has one."""
        specials = {t.content: i for i, t in self._tok.get_added_tokens_decoder().items() if t.special}
        return next((specials[n] for n in END_OF_TEXT if n in specials), None)

    def encode(self, text: str) -> torch.Tensor:
        return torch.from_numpy(self.encode_array(text)).long()

    def encode_special(self, text: str) -> torch.Tensor:
        """Text -> ids with the special tokens the tokenizer's post-processor adds (BERT's
        ``[CLS] ... [SEP]``), as a classifier reading the first token needs."""
        if not isinstance(text, str):
            raise TypeError(f"TokenizerVocab.encode_special takes str, got {type(text).__name__}")
        return torch.tensor(self._tok.encode(text, add_special_tokens=True).ids, dtype=torch.long)

    def decode(self, ids: Any) -> str:
        arr = ids_to_numpy(ids)
        check_range(arr, self.size, "tokenizer")
        return self._tok.decode(arr.tolist(), skip_special_tokens=False)

    def to_json(self) -> dict:
        return {"type": "tokenizer", "json": self.json}

    @classmethod
    def from_json(cls, d: dict) -> TokenizerVocab:
        if not isinstance(d, dict) or d.get("type") != "tokenizer" or not isinstance(d.get("json"), str):
            raise ValueError("not a tokenizer vocabulary; expected {'type': 'tokenizer', 'json': "
                             "<the text of a tokenizer.json>}")
        return cls(d["json"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenizerVocab) and other.json == self.json

    def __hash__(self) -> int:
        return hash(self.json)

    def __repr__(self) -> str:
        return f"TokenizerVocab(size={self.size})"
