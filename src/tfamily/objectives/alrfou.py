"""Al-Rfou et al. 2019 (Character-Level Language Modeling with Deeper Self-Attention,
section 2.2-2.4): three auxiliary losses that let a deep character Transformer converge.

- All positions: every position predicts its next character (their base model scored
  only the last position of a window); off, each window is scored at its end only: the
  next character at the last position, the character after next at the one before it
  (the last one whose second target lies inside the window).
- Intermediate layers: layer l = 1..n-1 (counted from the input) predicts through its own
  classifier; its loss stops once training progress passes l / (2n), so layer l is trained
  for l / (2n) of the run and the last layer's loss is never cut (section 2.3).
- Multiple targets: every scored layer also predicts the character after next through
  its own head, that loss weighted 0.5 and cut with its layer (section 2.4).

The total is the sum of every live loss. The classifiers exist only for training: in
evaluation the loss is the plain next-character loss of the last layer at every position,
so validation bits per character compare with any causal LM, and generation never runs them.
Progress comes from the training loop through ``set_progress`` (``models/hooks.SeesProgress``).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..nn.depth import Stack
from .lm import need, token_loss
from ..base.numbers import check_flag, check_number


def classifier(d_model: int, vocab_size: int) -> nn.Module:
    # Intermediate streams of a pre-norm stack are not normalised: each head brings its own norm.
    return nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, vocab_size))


class AuxiliaryLosses(nn.Module):
    """Batch ``{"x": (b, n), "y": (b, n)[, "loss_mask", "key_padding", "state"]}`` as for the
    causal LM; ``y`` holds the next characters, so the character after next of position t is
    ``y[t + 1]``. ``second_weight``: the multiple-target weight (0.5 in the paper)."""

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, all_positions: bool = True,
                 intermediate: bool = True, multiple_targets: bool = True, second_weight: float = 0.5):
        super().__init__()
        for name, value in (("all_positions", all_positions), ("intermediate", intermediate),
                            ("multiple_targets", multiple_targets)):
            check_flag(f"objective.params.{name}", value)
        check_number("objective.params.second_weight", second_weight, 0.0)
        self.n_layers, self.all_positions, self.second_weight = n_layers, all_positions, float(second_weight)
        # next_heads[l - 1] serves layer l < n; second_heads[l - 1] serves layer l <= n.
        self.next_heads = nn.ModuleList(
            [classifier(d_model, vocab_size) for _ in range(n_layers - 1)] if intermediate else [])
        n_second = (n_layers if intermediate else 1) if multiple_targets else 0
        self.second_heads = nn.ModuleList([classifier(d_model, vocab_size) for _ in range(n_second)])
        self.progress = 0.0

    def set_progress(self, progress: float) -> None:
        check_number("training progress", progress, 0.0)
        # Never back: a time budget's estimate of the last step moves, and a cut layer stays cut.
        self.progress = max(self.progress, float(progress))

    def live_layers(self) -> list[int]:
        """The layers (1..n) whose losses count at the current progress."""
        n = self.n_layers
        inner = [l for l in range(1, len(self.next_heads) + 1) if self.progress < l / (2 * n)]
        return [*inner, n]

    def _masks(self, y: Tensor, loss_mask: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
        """Loss masks of the next-character targets ``y`` and of the after-next ones ``y[:, 1:]``."""
        first = loss_mask
        second = None if loss_mask is None else loss_mask[:, 1:]
        if not self.all_positions:
            end = torch.zeros_like(y, dtype=torch.bool)
            end[:, -1] = True
            first = end if first is None else end & first.bool()
            second = end[:, 1:] if second is None else end[:, 1:] & second.bool()
        return first, second

    def forward(self, model: nn.Module, batch: dict) -> tuple[Tensor, dict]:
        need(batch, "x", "y")
        x, y = batch["x"], batch["y"]
        run = dict(key_padding=batch.get("key_padding"), state=batch.get("state"))
        if not self.training:
            return token_loss(model(x, **run), y, batch.get("loss_mask"))
        if not isinstance(model.stack, Stack):
            raise ValueError(f"the Al-Rfou losses read each layer's output, which a {type(model.stack).__name__} "
                             f"depth does not give one by one; use depth 'stack'")
        live = self.live_layers()
        wanted = {l: model.stack.blocks[l - 1] for l in live[:-1]}
        seen: dict[int, Tensor] = {}
        hooks = [block.register_forward_hook(lambda m, a, out, l=l: seen.__setitem__(l, out))
                 for l, block in wanted.items()]
        if self.second_heads:
            hooks.append(model.stack.register_forward_hook(lambda m, a, out: seen.__setitem__(self.n_layers, out)))
        try:
            logits = model(x, **run)
        finally:
            for h in hooks:
                h.remove()
        first, second = self._masks(y, batch.get("loss_mask"))
        loss, metrics = token_loss(logits, y, first)
        total = loss
        for l in live:
            parts = [] if l == self.n_layers else [token_loss(self.next_heads[l - 1](seen[l]), y, first)[0]]
            if self.second_heads and len(y[0]) > 1:
                head = self.second_heads[-1] if l == self.n_layers else self.second_heads[l - 1]
                parts.append(self.second_weight * token_loss(head(seen[l][:, :-1]), y[:, 1:], second)[0])
            for p in parts:
                total = total + p
            if parts:
                metrics[f"aux/layer{l}"] = sum(p.detach() for p in parts)  # a tensor: no GPU sync
        metrics["aux/live_layers"] = len(live)
        return total, {**metrics, "main_loss": float(loss.detach())}
