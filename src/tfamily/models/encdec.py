"""The vanilla encoder-decoder (Vaswani et al. 2017, section 3.1): an encoder stack
over the source and a decoder stack with causal self-attention and cross-attention
to the encoder output, sharing one embedding (section 3.4)."""
from __future__ import annotations

from torch import Tensor, nn

from ..nn.depth import Depth
from ..nn.dropout import maybe_dropout
from ..nn.embedding import TokenEmbedding
from ..nn.state import State, new_state
from .hooks import aux_losses, run_after_step, run_set_progress, with_aux_losses


class EncoderDecoder(nn.Module):
    def __init__(self, embed: TokenEmbedding, position: nn.Module, encoder: Depth, decoder: Depth,
                 head: nn.Module, objective: nn.Module, dropout: float = 0.0):
        super().__init__()
        self.embed, self.position, self.encoder, self.decoder, self.head = (
            embed, position, encoder, decoder, head)
        self.objective = objective
        self.drop = maybe_dropout(dropout)

    def encode(self, src: Tensor, src_padding: Tensor | None = None) -> Tensor:
        """``src``: (b, m) -> encoder output (b, m, d)."""
        return self.encoder(self.drop(self.position(self.embed(src))), key_padding=src_padding)

    def decode(self, tgt: Tensor, memory: Tensor, *, src_padding: Tensor | None = None,
               tgt_padding: Tensor | None = None, state: State | None = None) -> Tensor:
        """``tgt``: (b, n) -> logits (b, n, vocab), attending to ``memory`` (b, m, d)."""
        if tgt.shape[0] != memory.shape[0]:
            raise ValueError(f"batch size mismatch: decoder input has {tgt.shape[0]} rows but the "
                             f"encoder input has {memory.shape[0]}; pass the same batch to both")
        x = self.drop(self.position(self.embed(tgt), 0 if state is None else state.offset))
        x = self.decoder(x, state=state, key_padding=tgt_padding, context=memory,
                         context_padding=src_padding)
        if state is not None:
            state.advance(tgt.shape[1])
        return self.head(x)

    def forward(self, src: Tensor, tgt: Tensor, *, src_padding: Tensor | None = None,
                tgt_padding: Tensor | None = None) -> Tensor:
        if not hasattr(tgt, "shape") or not hasattr(src, "shape") or src.shape[0] != tgt.shape[0]:
            raise ValueError(f"batch size mismatch: source has {getattr(src, 'shape', ['?'])[0]} rows, "
                             f"target has {getattr(tgt, 'shape', ['?'])[0]}; they must be equal")
        return self.decode(tgt, self.encode(src, src_padding), src_padding=src_padding,
                           tgt_padding=tgt_padding)

    def loss(self, batch: dict) -> tuple[Tensor, dict]:
        """The objective's loss; in training mode plus every part's ``aux_loss()`` in the
        encoder or decoder (an adaptive span, an ACT ponder cost), reported as ``aux/<name>``."""
        return with_aux_losses(self, *self.objective(self, batch))

    def aux_losses(self) -> dict[str, Tensor]:
        return aux_losses(self)

    def after_step(self) -> None:
        """Call once after every optimiser step: runs each part's ``after_step()``."""
        run_after_step(self)

    def set_progress(self, progress: float) -> None:
        """Called by the loop before every step with the fraction of training done."""
        run_set_progress(self, progress)

    def new_state(self) -> State:
        return new_state(len(self.decoder), cross=True)
