"""A test-only recurrent model whose (h, c) is a carried state the trainer knows nothing
about: it goes through the State protocol only. Run as a script, it trains (or resumes)
one run: ``python lstm_model.py RUN_DIR [--resume] [key=value ...]``."""
from __future__ import annotations

import sys

import torch
from torch import Tensor, nn

from tfamily.nn.state import row_mask
from tfamily.objectives.lm import token_loss


class LSTMState:
    """An LSTM's hidden and cell state, (b, d) each, carried from batch to batch."""

    carried = True

    def __init__(self):
        self.h: Tensor | None = None
        self.c: Tensor | None = None
        self.offset = 0

    def advance(self, n: int) -> None:
        self.offset += n

    def state_dict(self) -> dict:
        out = {"offset": self.offset}
        if self.h is not None:
            out["h"], out["c"] = self.h, self.c
        return out

    def load_state_dict(self, state: dict) -> None:
        self.h, self.c, self.offset = state.get("h"), state.get("c"), int(state["offset"])

    def reorder(self, index: Tensor) -> None:
        if self.h is not None:
            self.h, self.c = self.h.index_select(0, index), self.c.index_select(0, index)

    def reset(self, rows=None) -> None:
        if rows is None or self.h is None:
            self.h = self.c = None
            self.offset = 0
            return
        keep = ~row_mask(rows, self.h.shape[0], self.h.device)[:, None]
        self.h, self.c = self.h * keep, self.c * keep  # zeros: nn.LSTM's initial state


class TinyLSTM(nn.Module):
    def __init__(self, vocab_size: int = 128, d: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d)
        self.drop = nn.Dropout(0.1)  # so the RNG state matters for resuming
        self.lstm = nn.LSTM(d, d, batch_first=True)
        self.head = nn.Linear(d, vocab_size)

    def new_state(self) -> LSTMState:
        return LSTMState()

    def forward(self, x: Tensor, state: LSTMState | None = None) -> Tensor:
        hc = None
        if state is not None and state.h is not None:
            hc = (state.h[None].to(x.device), state.c[None].to(x.device))
        out, (h, c) = self.lstm(self.drop(self.embed(x)), hc)
        if state is not None:
            # Truncated backpropagation through time: gradients stop at the batch boundary.
            state.h, state.c = h[0].detach(), c[0].detach()
            state.advance(x.shape[1])
        return self.head(out)

    def loss(self, batch: dict):
        return token_loss(self(batch["x"], batch.get("state")), batch["y"], batch.get("loss_mask"))


ARGS = ["data.corpus=tinyshakespeare", "data.stream=true", "data.seq_len=16", "train.batch_size=4",
        "train.max_steps=12", "train.ckpt_every=4", "train.keep=2", "train.log_every=1", "train.eval_every=null",
        "train.eval_tokens=512", "train.warmup=3", "train.lr=3e-3", "train.threads=1", "train.precision=fp32",
        "train.progress=false", "train.tensorboard=false"]


def main(argv: list[str]) -> None:
    from tfamily.train import fit, loop
    from tfamily.train.config import load
    run, resume, extra = argv[0], "--resume" in argv, [a for a in argv[1:] if a != "--resume"]
    cfg = fit.resume_config(run) if resume else load(None, [*ARGS, f"train.out={run}", *extra])
    torch.manual_seed(0)
    trainer = loop.Trainer(cfg, model=TinyLSTM(), resume=run if resume else None)
    trainer.fit()
    trainer.close()


if __name__ == "__main__":
    main(sys.argv[1:])
