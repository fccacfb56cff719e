"""An LSTM encoder-decoder without attention (Sutskever et al. 2014), the recurrent baseline
of the Universal Transformer's algorithmic tasks (Dehghani et al. 2019, table 2).

The encoder's final (h, c) at each row's last real source token starts the decoder; the
decoder is teacher-forced on ``tgt_in`` in training and fed its own argmax in ``greedy``.
It takes the seq2seq pair batches of ``train.tasks.seq2seq`` (padding masks True on real
tokens) so it trains in the same loop as the family's encoder-decoders.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence

from ..models.generate import greedy_loop


class LSTMSeq2Seq(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, n_layers: int = 2):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("n_layers", n_layers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"LSTMSeq2Seq {name} must be an integer >= 1, got {value!r}")
        self.embed = nn.Embedding(vocab_size, d_model)
        self.encoder = nn.LSTM(d_model, d_model, n_layers, batch_first=True)
        self.decoder = nn.LSTM(d_model, d_model, n_layers, batch_first=True)
        self.head = nn.Linear(d_model, vocab_size)

    def encode(self, src: Tensor, src_padding: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(h, c) after each row's last real token; ``src_padding`` True on real tokens."""
        lengths = (src_padding.sum(1) if src_padding is not None
                   else torch.full((src.shape[0],), src.shape[1], device=src.device))
        packed = pack_padded_sequence(self.embed(src), lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, state = self.encoder(packed)
        return state

    def forward(self, src: Tensor, tgt: Tensor, *, src_padding: Tensor | None = None,
                tgt_padding: Tensor | None = None) -> Tensor:
        """Teacher-forced logits (b, n, vocab); padding after a row's target is causal-harmless."""
        out, _ = self.decoder(self.embed(tgt), self.encode(src, src_padding))
        return self.head(out)

    def loss(self, batch: dict) -> tuple[Tensor, dict]:
        logits = self(batch["src"], batch["tgt_in"], src_padding=batch.get("src_padding"))
        mask = batch["loss_mask"]
        nll = F.cross_entropy(logits[mask].float(), batch["tgt_out"][mask])
        return nll, {"nll": float(nll.detach())}

    @torch.no_grad()
    def greedy(self, src: Tensor, *, bos: int, eos: int, max_len: int, src_padding: Tensor | None = None) -> Tensor:
        """Argmax decoding, (b, <= max_len + 1) starting with ``bos``; finished rows padded with ``eos``."""
        was_training = self.training
        self.eval()
        try:
            state = [self.encode(src, src_padding)]

            def step(last: Tensor) -> Tensor:
                out, state[0] = self.decoder(self.embed(last), state[0])
                return self.head(out[:, -1])
            return greedy_loop(step, src.shape[0], bos=bos, eos=eos, max_len=max_len, device=src.device)
        finally:
            self.train(was_training)
