"""The vanilla encoder-decoder (Vaswani et al. 2017, section 3.1): an encoder stack
over the source and a decoder stack with causal self-attention and cross-attention
to the encoder output, sharing one embedding (section 3.4)."""
from __future__ import annotations

from torch import Tensor, nn

from ..nn.depth import Depth
from ..nn.dropout import maybe_dropout
from ..nn.embedding import TokenEmbedding
from ..nn.state import State, new_state
from .hooks import ForwardsHooks


def _at(offset: int | Tensor | None) -> dict:
    """The depth's ``offset`` keyword: only when one is given, so a depth without position
    signals of its own runs exactly as before."""
    return {} if offset is None else {"offset": offset}


class EncoderDecoder(ForwardsHooks, nn.Module):
    citation = "Vaswani et al. 2017, section 3.1 and figure 1: encoder stack, decoder stack with cross-attention"

    def __init__(self, embed: TokenEmbedding, position: nn.Module, encoder: Depth, decoder: Depth,
                 head: nn.Module, objective: nn.Module, dropout: float = 0.0):
        super().__init__()
        self.embed, self.position, self.encoder, self.decoder, self.head = (
            embed, position, encoder, decoder, head)
        self.objective = objective
        self.drop = maybe_dropout(dropout)

    def encode(self, src: Tensor, src_padding: Tensor | None = None, offset: int | Tensor | None = None) -> Tensor:
        """``src``: (b, m) -> encoder output (b, m, d). ``offset``: the position of the first token,
        an int or a (b,) tensor of row offsets (the Universal Transformer's randomized offsets,
        ``repro/ut_algorithmic.py``), for the input positions and a depth's own (the UT's
        coordinate signal); None: 0."""
        x = self.drop(self.position(self.embed(src), 0 if offset is None else offset))
        return self.encoder(x, key_padding=src_padding, **_at(offset))

    def decode(self, tgt: Tensor, memory: Tensor, *, src_padding: Tensor | None = None,
               tgt_padding: Tensor | None = None, state: State | None = None,
               offset: int | Tensor | None = None) -> Tensor:
        """``tgt``: (b, n) -> logits (b, n, vocab), attending to ``memory`` (b, m, d). ``offset``
        as in ``encode``; None: where ``state`` has got to (0 without one)."""
        if tgt.shape[0] != memory.shape[0]:
            raise ValueError(f"batch size mismatch: decoder input has {tgt.shape[0]} rows but the "
                             f"encoder input has {memory.shape[0]}; pass the same batch to both")
        start = offset if offset is not None else 0 if state is None else state.offset
        x = self.drop(self.position(self.embed(tgt), start))
        x = self.decoder(x, state=state, key_padding=tgt_padding, context=memory,
                         context_padding=src_padding, **_at(offset))
        if state is not None:
            state.advance(tgt.shape[1])
        return self.head(x)

    def forward(self, src: Tensor, tgt: Tensor, *, src_padding: Tensor | None = None,
                tgt_padding: Tensor | None = None, offset: int | Tensor | None = None) -> Tensor:
        if not hasattr(tgt, "shape") or not hasattr(src, "shape") or src.shape[0] != tgt.shape[0]:
            raise ValueError(f"batch size mismatch: source has {getattr(src, 'shape', ['?'])[0]} rows, "
                             f"target has {getattr(tgt, 'shape', ['?'])[0]}; they must be equal")
        return self.decode(tgt, self.encode(src, src_padding, offset), src_padding=src_padding,
                           tgt_padding=tgt_padding, offset=offset)

    def new_state(self) -> State:
        return new_state(len(self.decoder), cross=True)
