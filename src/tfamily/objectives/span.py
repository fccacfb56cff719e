"""T5's span corruption (Raffel et al. 2020, section 3.3.4 and figure 2), for the encoder-decoder.

For a window of L tokens the counts are fixed by L, as in T5's ``random_spans_noise_mask``
(computed in float32 as there): ``noise = clamp(round(0.15 L), 1, L - 1)`` tokens in
``spans = max(round(noise / 3), 1)`` spans (never more spans than non-noise tokens, which
only binds for noise densities far above 0.15). Noise and non-noise tokens are each cut
into ``spans`` pieces uniformly at random (every composition equally likely), and the
pieces alternate, non-noise first, so the window ends in a noise span.

The encoder input keeps the non-noise tokens and replaces each noise span by one sentinel;
the target is each sentinel followed by its span, closed by one more sentinel (the
paper's figure 2: "<X> for inviting <Y> last <Z>"), not by an EOS: our vocabularies have
no EOS, and the closing sentinel tells the decoder where the target stops. Sentinel k is
the id ``vocab_size + n_sentinels - k``: T5 counts down from the vocabulary's end, so the
first sentinel is the last row of the embedding. One more reserved id, ``vocab_size``,
starts the decoder input (T5 starts it with its pad id). The tokenizer never produces any
of them: they lie past the data's ids.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .lm import need, token_loss
from ..base.numbers import check_int, check_number


def span_counts(length: int, noise_density: float = 0.15, mean_span: float = 3.0) -> tuple[int, int]:
    """(noise tokens, noise spans) for a window of ``length`` tokens."""
    check_int("span corruption window length", length, 2, hint="windows need at least 2 tokens (one kept, one noise): raise data.seq_len")
    f32 = torch.float32  # T5 rounds float32 products: round(0.15 * 190) is 29 there, 28 in float64
    noise = int(torch.round(torch.tensor(length, dtype=f32) * torch.tensor(noise_density, dtype=f32)))
    noise = min(max(noise, 1), length - 1)
    spans = max(int(torch.round(torch.tensor(noise, dtype=f32) / torch.tensor(mean_span, dtype=f32))), 1)
    return noise, min(spans, length - noise)


def random_segmentation(rows: int, n_items: int, n_segments: int, generator: torch.Generator | None = None,
                        device=None) -> Tensor:
    """(rows, n_segments) lengths >= 1 summing to ``n_items``: ``n_segments - 1`` of the
    ``n_items - 1`` gaps between items, chosen uniformly, become cuts."""
    if n_segments == 1:
        return torch.full((rows, 1), n_items, dtype=torch.long, device=device)
    keys = torch.rand(rows, n_items - 1, generator=generator, device=device)
    cuts = (keys.argsort(-1)[:, :n_segments - 1] + 1).sort(-1).values
    ends = torch.full((rows, 1), n_items, dtype=torch.long, device=device)
    return torch.cat([torch.zeros_like(ends), cuts, ends], -1).diff(dim=-1)


def noise_mask(rows: int, length: int, noise_density: float = 0.15, mean_span: float = 3.0,
               generator: torch.Generator | None = None, device=None) -> Tensor:
    """(rows, length) bool, True at noise tokens: alternating kept and noise pieces, kept first."""
    noise, spans = span_counts(length, noise_density, mean_span)
    kept = random_segmentation(rows, length - noise, spans, generator, device)
    noisy = random_segmentation(rows, noise, spans, generator, device)
    ends = torch.stack([kept, noisy], -1).flatten(1).cumsum(-1)          # (rows, 2 spans)
    where = torch.arange(length, device=device).expand(rows, length).contiguous()
    return torch.searchsorted(ends, where, right=True) % 2 == 1           # odd pieces are noise


def corrupt(x: Tensor, noise: Tensor, sentinels: Tensor) -> tuple[Tensor, Tensor]:
    """``x`` (b, L) ids and its ``noise`` mask (every row with the same counts) -> (inputs
    (b, L - noise + spans), targets (b, noise + spans + 1)); ``sentinels[k]`` marks span k."""
    b = x.shape[0]
    starts = noise & ~F.pad(noise[:, :-1], (1, 0), value=False)
    n_spans = int(starts[0].sum()) if b else 0
    if n_spans + 1 > len(sentinels):
        raise ValueError(f"{n_spans} noise spans need {n_spans + 1} sentinels, but only {len(sentinels)} are "
                         f"reserved; raise objective.params.n_sentinels or lower data.seq_len")
    sent = sentinels[(starts.long().cumsum(-1) - 1).clamp_min(0)]
    inputs = torch.where(starts, sent, x)[~noise | starts].view(b, -1)
    # Each position contributes [its span's sentinel if a span starts there][its token if noise].
    slots = torch.stack([starts, noise], -1).flatten(1)
    targets = torch.stack([sent, x], -1).flatten(1)[slots].view(b, -1)
    close = sentinels[n_spans].expand(b, 1)
    return inputs, torch.cat([targets, close], -1)


def restore(inputs: list[int], targets: list[int], sentinels: list[int]) -> list[int]:
    """The original window from one row's input and target: each sentinel in the input is
    replaced by the tokens that follow the same sentinel in the target."""
    marks = set(sentinels)
    spans, current = {}, None
    for t in targets:
        if t in marks:
            current = spans.setdefault(t, [])
        elif current is None:
            raise ValueError(f"the target must start with a sentinel, got {targets[:3]}")
        else:
            current.append(t)
    out = []
    for t in inputs:
        if t in marks and t not in spans:
            raise ValueError(f"sentinel {t} is in the input but not in the target")
        out.extend(spans[t] if t in marks else [t])
    return out


class SpanCorruption(nn.Module):
    """Batch ``{"x": (b, L)}`` of text windows (all real tokens); the encoder reads the
    corrupted window, the decoder is teacher-forced on the target (start id, then the
    target shifted right). Evaluation uses a generator seeded with ``eval_seed``."""

    def __init__(self, vocab_size: int, noise_density: float = 0.15, mean_span: float = 3.0,
                 n_sentinels: int = 100, eval_seed: int = 0):
        super().__init__()
        check_number("noise_density", noise_density, 0.0, 1.0, lo_open=True, hi_open=True, hint="T5: 0.15")
        check_number("mean_span", mean_span, 1.0, hint="T5: 3")
        check_int("n_sentinels", n_sentinels, 2, hint="one span and the closing sentinel")
        self.vocab_size, self.noise_density, self.mean_span = vocab_size, float(noise_density), float(mean_span)
        self.eval_seed, self.start_id = eval_seed, vocab_size
        self.extra_tokens = 1 + n_sentinels
        self.register_buffer("sentinels", torch.arange(vocab_size + n_sentinels, vocab_size, -1), persistent=False)

    def corrupt(self, x: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        if x.dim() != 2:
            raise ValueError(f"span corruption takes token ids of shape (batch, length), got {tuple(x.shape)}")
        if x.device.type == "cpu" and x.numel() and not 0 <= int(x.min()) <= int(x.max()) < self.vocab_size:
            raise ValueError(f"token ids must be data ids in [0, {self.vocab_size - 1}] (ids from "
                             f"{self.vocab_size} on are reserved for the start id and sentinels), got "
                             f"{int(x.min())}..{int(x.max())}")
        noise = noise_mask(x.shape[0], x.shape[1], self.noise_density, self.mean_span, generator, x.device)
        return corrupt(x, noise, self.sentinels)

    def forward(self, model: nn.Module, batch: dict) -> tuple[Tensor, dict]:
        need(batch, "x")
        pad = batch.get("key_padding")
        if pad is not None and not bool(pad.all()):
            raise ValueError("span corruption takes full windows without padding (every row has the same "
                             "counts); drop key_padding or batch windows of one length")
        x = batch["x"]
        gen = None if self.training else torch.Generator(device=x.device).manual_seed(self.eval_seed)
        inputs, targets = self.corrupt(x, gen)
        start = torch.full_like(targets[:, :1], self.start_id)
        logits = model(inputs, torch.cat([start, targets[:, :-1]], -1))
        return token_loss(logits, targets)
