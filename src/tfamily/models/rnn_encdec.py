"""A recurrent encoder-decoder with attention (Bahdanau et al. 2015; Luong et al. 2015), or
without it (Sutskever et al. 2014): an RNN/LSTM/GRU encoder, optionally bidirectional,
over the source, and one of the two decoders of ``rnn_decoders.py``.

It answers the encoder-decoder interface of ``models/encdec.py`` (``encode``, ``decode``
with a state, ``forward(src, tgt)``, ``loss``, ``new_state``), so the ``seq2seq``
objective trains it in the shared loop and ``generate.greedy_decode`` / ``beam_search``
decode it: ``encode`` returns an ``Encoded`` whose rows can be selected like a tensor's
(``memory[rows]``: one copy per beam), and the ``DecoderState`` reorders each beam's
(h, c) and h~ with the beams.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..nn.depth import Hidden, check_right_padding, select_rows
from ..nn.dropout import maybe_dropout
from ..nn.embedding import TokenEmbedding
from .hooks import ForwardsHooks
from .rnn_decoders import BahdanauDecoder, DecoderState, LuongDecoder


@dataclass
class Encoded:
    """The encoder's top-layer states h_s (b, m, d_context), zero on padding, its final hidden
    state (L * directions, b, d) and the source padding (b, m), True on real tokens."""

    outputs: Tensor
    final: Hidden
    padding: Tensor | None

    @property
    def shape(self) -> torch.Size:
        return self.outputs.shape

    def __getitem__(self, rows: Tensor) -> Encoded:
        """Select batch rows (beam search: each source repeated once per beam)."""
        rows = torch.as_tensor(rows, device=self.outputs.device)
        return Encoded(self.outputs[rows], select_rows(self.final, rows),
                       self.padding[rows] if self.padding is not None else None)


class RNNEncoderDecoder(ForwardsHooks, nn.Module):
    citation = ("Sutskever et al. 2014; Bahdanau et al. 2015; Luong et al. 2015: a recurrent encoder read by a "
                "recurrent decoder")

    def __init__(self, embed: TokenEmbedding, encoder: nn.RNNBase, decoder: LuongDecoder | BahdanauDecoder,
                 head: nn.Module, objective: nn.Module, dropout: float = 0.0):
        super().__init__()
        self.embed, self.encoder, self.decoder, self.head = embed, encoder, decoder, head
        self.objective = objective
        self.drop = maybe_dropout(dropout)

    def encode(self, src: Tensor, src_padding: Tensor | None = None) -> Encoded:
        """``src`` (b, m) -> ``Encoded``; each row is read up to its last real token (packed),
        so padding changes neither its states nor its final state."""
        x = self.drop(self.embed(src))
        if src_padding is None:
            out, final = self.encoder(x)
            return Encoded(out, final, None)
        check_right_padding(src_padding)
        lengths = src_padding.sum(1)
        if bool((lengths == 0).any()):
            raise ValueError("a source row has no real token (src_padding all False); drop empty rows")
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, final = self.encoder(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        return Encoded(out, final, src_padding)

    def _start(self, memory: Encoded, state: DecoderState, like: Tensor) -> None:
        hidden, feed = self.decoder.initial(memory.final, memory.outputs.shape[0], like)
        score = self.decoder.score
        state.start(hidden, score.keys(memory.outputs) if score is not None else None, feed)

    def run(self, tgt: Tensor, memory: Encoded, *, src_padding: Tensor | None = None,
            tgt_padding: Tensor | None = None, state: DecoderState | None = None) -> tuple[Tensor, Tensor | None]:
        """(logits (b, n, vocab), attention weights (b, n, m) or None without attention)."""
        if not isinstance(memory, Encoded):
            raise TypeError(f"decode takes the Encoded that encode() returns, got {type(memory).__name__}")
        if tgt.shape[0] != memory.outputs.shape[0]:
            raise ValueError(f"batch size mismatch: decoder input has {tgt.shape[0]} rows but the encoder "
                             f"input has {memory.outputs.shape[0]}; pass the same batch to both")
        check_right_padding(tgt_padding)  # padding after a target never reaches its real steps
        state = state if state is not None else DecoderState()
        y = self.drop(self.embed(tgt))
        if not state.started:
            self._start(memory, state, y)
        pad = src_padding if src_padding is not None else memory.padding
        out, weights = self.decoder(y, memory.outputs, pad, state)
        state.advance(tgt.shape[1])
        return self.head(self.drop(out)), weights

    def decode(self, tgt: Tensor, memory: Encoded, *, src_padding: Tensor | None = None,
               tgt_padding: Tensor | None = None, state: DecoderState | None = None) -> Tensor:
        """``tgt`` (b, n) -> logits (b, n, vocab); with ``state`` decoding continues from it."""
        return self.run(tgt, memory, src_padding=src_padding, tgt_padding=tgt_padding, state=state)[0]

    def forward(self, src: Tensor, tgt: Tensor, *, src_padding: Tensor | None = None,
                tgt_padding: Tensor | None = None) -> Tensor:
        if not hasattr(tgt, "shape") or not hasattr(src, "shape") or src.shape[0] != tgt.shape[0]:
            raise ValueError(f"batch size mismatch: source has {getattr(src, 'shape', ['?'])[0]} rows, "
                             f"target has {getattr(tgt, 'shape', ['?'])[0]}; they must be equal")
        return self.decode(tgt, self.encode(src, src_padding), tgt_padding=tgt_padding)

    @torch.no_grad()
    def alignments(self, src: Tensor, tgt: Tensor, src_padding: Tensor | None = None) -> Tensor:
        """Attention weights (b, n, m) of target step t over source position s, teacher-forced."""
        if self.decoder.score is None:
            raise ValueError("this encoder-decoder has no attention (alignment 'none'): nothing to draw; "
                             "train one with depth.params.alignment set to dot, general, concat or additive")
        return self.run(tgt, self.encode(src, src_padding))[1]

    def new_state(self) -> DecoderState:
        return DecoderState()
