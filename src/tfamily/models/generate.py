"""Decoding with a KV cache: greedy, temperature, top-k and top-p (nucleus,
Holtzman et al. 2020) sampling for decoders; greedy and beam search for the
encoder-decoder (Vaswani et al. 2017, section 6.1: beam size 4, length penalty)."""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .encdec import EncoderDecoder


def _check_count(name: str, value, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__}); e.g. {name}=100")
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")


def _check_ids(model: EncoderDecoder, **ids) -> None:
    """``bos``/``eos`` are ids the model can emit: an id outside the vocabulary would index
    past the log-probabilities (or never match, so no beam ever finishes)."""
    vocab = model.embed.vocab_size
    for name, value in ids.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
            raise ValueError(f"{name}={value!r} is outside the vocabulary [0, {vocab - 1}]; pass the id of the "
                             f"{name} token")


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}; use greedy=True for argmax")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def pick_next(logits: Tensor, *, greedy: bool = False, temperature: float = 1.0, top_k: int | None = None,
              top_p: float | None = None, generator: torch.Generator | None = None) -> Tensor:
    """``logits``: (b, vocab) -> next ids (b,)."""
    if greedy:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the mass before it already reaches top_p (the top token always stays).
        drop_sorted = probs.cumsum(-1) - probs >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(model, prompt: Tensor, max_new_tokens: int, *, greedy: bool = False, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None,
             use_cache: bool = True, on_token: Callable[[Tensor], None] | None = None) -> Tensor:
    """Continue ``prompt`` (b, n) by ``max_new_tokens``; returns (b, n + max_new_tokens).
    With ``use_cache`` each step feeds one token and reuses cached keys/values."""
    _check_sampling(temperature, top_k, top_p)
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must have shape (batch, n >= 1), got {tuple(prompt.shape)}")
    _check_count("max_new_tokens", max_new_tokens, 0)
    was_training = model.training
    model.eval()
    try:
        state = model.new_state() if use_cache else None
        out, feed = prompt, prompt
        for _ in range(max_new_tokens):
            logits = model(feed, state=state)[:, -1]
            nxt = pick_next(logits, greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p,
                            generator=generator)[:, None]
            out = torch.cat([out, nxt], dim=1)
            feed = nxt if use_cache else out
            if on_token is not None:
                on_token(nxt)
        return out
    finally:
        model.train(was_training)


@torch.no_grad()
def beam_search(model: EncoderDecoder, src: Tensor, *, bos: int, eos: int, max_len: int, beam: int = 4,
                src_padding: Tensor | None = None, length_penalty: float = 0.0) -> Tensor:
    """Best hypothesis per source row, (b, <= max_len + 1) starting with ``bos``; finished
    rows are padded with ``eos``. Scores are log-probabilities divided by
    ``len ** length_penalty`` (0 = raw sum). ``beam=1`` is greedy decoding."""
    _check_count("beam", beam, 1)
    _check_count("max_len", max_len, 1)
    _check_ids(model, bos=bos, eos=eos)
    was_training = model.training
    model.eval()
    try:
        b = src.shape[0]
        memory = model.encode(src, src_padding)
        rows = torch.arange(b, device=src.device).repeat_interleave(beam)
        memory, pad = memory[rows], (src_padding[rows] if src_padding is not None else None)
        state = model.new_state()
        seqs = torch.full((b * beam, 1), bos, dtype=torch.long, device=src.device)
        # Only the first beam of each row is live at the start, so beams don't duplicate.
        scores = torch.full((b, beam), float("-inf"), device=src.device)
        scores[:, 0] = 0.0
        scores = scores.flatten()
        done = torch.zeros(b * beam, dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logp = model.decode(seqs[:, -1:], memory, src_padding=pad, state=state)[:, -1].float().log_softmax(-1)
            v = logp.shape[-1]
            # Finished beams extend only with eos at no cost.
            logp = torch.where(done[:, None], torch.full_like(logp, float("-inf")), logp)
            logp[:, eos] = torch.where(done, torch.zeros_like(logp[:, eos]), logp[:, eos])
            total = (scores[:, None] + logp).view(b, beam * v)
            top, idx = total.topk(beam, dim=-1)
            origin = (idx // v) + torch.arange(b, device=src.device)[:, None] * beam
            origin, token = origin.flatten(), (idx % v).flatten()
            state.reorder(origin)  # every kind of state keeps the surviving beams' rows
            seqs = torch.cat([seqs[origin], token[:, None]], dim=1)
            scores, done = top.flatten(), done[origin] | (token == eos)
            if done.all():
                break
        lengths = (seqs != eos).sum(-1).clamp_min(1).float()
        final = (scores / lengths ** length_penalty).view(b, beam)
        best = final.argmax(-1) + torch.arange(b, device=src.device) * beam
        return seqs[best]
    finally:
        model.train(was_training)


@torch.no_grad()
def greedy_decode(model: EncoderDecoder, src: Tensor, *, bos: int, eos: int, max_len: int,
                  src_padding: Tensor | None = None) -> Tensor:
    """Argmax decoding with a KV cache; finished rows are padded with ``eos``."""
    _check_count("max_len", max_len, 1)
    _check_ids(model, bos=bos, eos=eos)
    was_training = model.training
    model.eval()
    try:
        memory = model.encode(src, src_padding)
        state = model.new_state()
        return greedy_loop(lambda last: model.decode(last, memory, src_padding=src_padding, state=state)[:, -1],
                           src.shape[0], bos=bos, eos=eos, max_len=max_len, device=src.device)
    finally:
        model.train(was_training)


def greedy_loop(step: Callable[[Tensor], Tensor], batch: int, *, bos: int, eos: int, max_len: int,
                device: torch.device) -> Tensor:
    """Argmax decoding around ``step`` (the last token (b, 1) -> next-token logits (b, vocab), its
    state kept by the caller): (b, <= max_len + 1) from ``bos``; finished rows padded with ``eos``."""
    seqs = torch.full((batch, 1), bos, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    for _ in range(max_len):
        nxt = torch.where(done, torch.full_like(done, eos, dtype=torch.long), step(seqs[:, -1:]).argmax(-1))
        seqs = torch.cat([seqs, nxt[:, None]], dim=1)
        done |= nxt == eos
        if done.all():
            break
    return seqs
