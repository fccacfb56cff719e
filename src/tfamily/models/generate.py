"""Decoding with a KV cache: greedy, temperature, top-k and top-p (nucleus,
Holtzman et al. 2020) sampling for decoders, step by step (``stream``) or whole
(``generate``), on prompts of different lengths batched with left padding; greedy and
beam search for the encoder-decoder (Vaswani et al. 2017, section 6.1: beam size 4,
length penalty)."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

from ..nn.attention import Attention
from ..nn.state import CacheState
from .encdec import EncoderDecoder
from .lm import LanguageModel
from ..base.numbers import check_int

Generator = torch.Generator | Sequence[torch.Generator]  # one for the batch, or one per row


def _check_count(name: str, value, lo: int) -> None:
    check_int(name, value, lo)


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
              top_p: float | None = None, generator: Generator | None = None) -> Tensor:
    """``logits``: (b, vocab) -> next ids (b,). ``generator`` may be one per row (a list), so a
    row samples the same tokens whatever batch it sits in."""
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
    probs = logits.softmax(-1)
    if isinstance(generator, (list, tuple)):
        if len(generator) != probs.shape[0]:
            raise ValueError(f"got {len(generator)} generators for {probs.shape[0]} rows; pass one per row or one")
        return torch.cat([torch.multinomial(probs[r:r + 1], 1, generator=g) for r, g in enumerate(generator)])[:, 0]
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def left_pad(prompts: Sequence[Tensor], pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Prompts of different lengths (each (n_i,) ids) -> ``(ids, padding)``, both (b, max n_i):
    each row right-aligned so that every row's next token comes at the same column, and
    ``padding`` True on real tokens."""
    if len(prompts) == 0 or any(p.dim() != 1 or p.numel() < 1 for p in prompts):
        raise ValueError(f"prompts must be a non-empty list of 1-D id tensors with >= 1 token each, got shapes "
                         f"{[tuple(p.shape) for p in prompts]}")
    n = max(p.numel() for p in prompts)
    ids = torch.full((len(prompts), n), pad_id, dtype=torch.long, device=prompts[0].device)
    padding = torch.zeros(len(prompts), n, dtype=torch.bool, device=prompts[0].device)
    for r, p in enumerate(prompts):
        ids[r, n - p.numel():], padding[r, n - p.numel():] = p, True
    return ids, padding


def check_generates(model) -> None:
    """``generate`` continues text token by token: only a decoder whose every attention is causal
    can. An encoder (BERT's masked LM, a classifier) sees both ways; an encoder-decoder decodes
    from a source."""
    if isinstance(model, EncoderDecoder) or not isinstance(model, LanguageModel):
        raise ValueError(f"generate continues a decoder-only LM, not a {type(model).__name__}; decode an "
                         f"encoder-decoder with beam_search or greedy_decode, score a classifier with `tfamily eval`")
    both_ways = sorted({a.pattern.name for a in model.modules() if isinstance(a, Attention) and not a.pattern.causal})
    if both_ways:
        raise ValueError(f"this model attends both ways (pattern {both_ways[0]!r}: an encoder such as BERT), so it "
                         f"cannot continue text; score it with `tfamily eval` or train a decoder (member gpt)")


# Kernels whose output depends on where a row starts, beyond the mask: LSH derives its bucket
# count from the number of keys (``lsh/kernel.py``, ``buckets_for``), which padding changes.
_KEY_COUNT_KERNELS = ("lsh",)


def check_left_padding(model, state, pads: Tensor, length: int) -> None:
    """Left padding shifts every real token right by its row's ``pads``: equivalent to the row
    alone only for a KV cache (carried states, XL memory or an RNN's hidden state, would read the
    padding as text) and for patterns that depend on i - j alone (not global tokens, fixed
    blocks or random blocks placed by absolute position), checked on the ``length`` positions used."""
    if not isinstance(state, CacheState):
        raise ValueError(f"prompts of different lengths need a KV cache, but this model carries "
                         f"{type(state).__name__} (XL memory or a recurrent state reads padding as text); "
                         f"generate them one at a time or give them equal lengths")
    seen: set[int] = set()
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    for a in (m for m in model.modules() if isinstance(m, Attention)):
        if a.kernel.name in _KEY_COUNT_KERNELS:
            raise ValueError(f"kernel {a.kernel.name!r} depends on the number of keys, so padding changes a "
                             f"row's tokens; generate prompts of different lengths one at a time")
        if id(a.pattern) in seen:
            continue
        seen.add(id(a.pattern))
        h, b = torch.arange(a.proj.n_heads)[:, None, None], torch.zeros((), dtype=torch.long)
        base = a.pattern.mask_mod(b, h, i, j) & (j <= i)
        for s in pads.unique().tolist():
            if not torch.equal(base, a.pattern.mask_mod(b, h, i + s, j + s) & (j <= i)):
                raise ValueError(f"pattern {a.pattern.name!r} places tokens by absolute position, so left "
                                 f"padding changes what a row sees; generate prompts of different lengths one "
                                 f"at a time")


def stream(model, prompt: Tensor, max_new_tokens: int, *, padding: Tensor | None = None, greedy: bool = False,
           temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
           generator: Generator | None = None, use_cache: bool = True) -> Iterator[Tensor]:
    """Yield the next ids (b,) of every row, one step at a time, continuing ``prompt`` (b, n).
    ``padding`` (b, n) bool, True on real tokens, marks left padding (``left_pad``): each row
    then continues exactly as it would alone. With ``use_cache`` each step feeds one token and
    reuses cached keys/values; without it every step recomputes the whole sequence. The arguments
    are checked at the call; the model is in eval mode until the iterator ends or is closed."""
    _check_sampling(temperature, top_k, top_p)
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must have shape (batch, n >= 1), got {tuple(prompt.shape)}")
    _check_count("max_new_tokens", max_new_tokens, 0)
    check_generates(model)
    pads = _pads(prompt, padding)
    if pads is None:
        padding = None  # no row is padded: the kernels keep their unmasked fast paths
    else:
        check_left_padding(model, model.new_state(), pads, prompt.shape[1] + max_new_tokens)
    pick = dict(greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
    return _steps(model, prompt, max_new_tokens, padding, pads, pick, use_cache)


@torch.no_grad()
def _steps(model, prompt: Tensor, max_new_tokens: int, padding: Tensor | None, pads: Tensor | None, pick: dict,
           use_cache: bool) -> Iterator[Tensor]:
    was_training = model.training
    model.eval()
    try:
        state = _new_state(model, pads) if use_cache else None
        out, feed = prompt, prompt
        for _ in range(max_new_tokens):
            s = state if use_cache else (_new_state(model, pads) if pads is not None else None)
            logits = model(feed, state=s, key_padding=padding)[:, -1]
            nxt = pick_next(logits, **pick)
            out = torch.cat([out, nxt[:, None]], dim=1)
            feed = nxt[:, None] if use_cache else out
            if padding is not None:
                padding = torch.cat([padding, padding.new_ones(padding.shape[0], 1)], dim=1)
            yield nxt
    finally:
        model.train(was_training)


def _pads(prompt: Tensor, padding: Tensor | None) -> Tensor | None:
    """Each row's columns of left padding (b,), or None when no row has any."""
    if padding is None:
        return None
    if padding.dtype != torch.bool or padding.shape != prompt.shape:
        raise ValueError(f"padding must be a bool tensor shaped like the prompt {tuple(prompt.shape)} (True = "
                         f"real token), got {padding.dtype} {tuple(padding.shape)}; make both with left_pad")
    pads = (~padding).sum(1)
    left = torch.arange(prompt.shape[1], device=prompt.device)[None, :] >= pads[:, None]
    if not torch.equal(left, padding) or bool((pads == prompt.shape[1]).any()):
        raise ValueError("padding must be left padding (False columns first, then True) with >= 1 real token "
                         "per row; make it with left_pad")
    return pads if bool(pads.any()) else None


def _new_state(model, pads: Tensor | None):
    state = model.new_state()
    if pads is not None:
        state.pad_left(pads)
    return state


def generate(model, prompt: Tensor | Sequence[Tensor], max_new_tokens: int, *, padding: Tensor | None = None,
             greedy: bool = False, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             generator: Generator | None = None, use_cache: bool = True,
             on_token: Callable[[Tensor], None] | None = None) -> Tensor | list[Tensor]:
    """Continue ``prompt`` (b, n) by ``max_new_tokens``; returns (b, n + max_new_tokens).
    A list of prompts of different lengths (each (n_i,)) is decoded as one left-padded batch
    and returns a list: each prompt followed by its continuation, as if generated alone.
    ``on_token`` sees each step's ids (b, 1); ``stream`` yields them instead."""
    if isinstance(prompt, (list, tuple)):
        if padding is not None:
            raise ValueError("padding comes from the list of prompts; pass either a list or (prompt, padding)")
        ids, padding = left_pad(prompt)
        new = generate(model, ids, max_new_tokens, padding=padding, greedy=greedy, temperature=temperature,
                       top_k=top_k, top_p=top_p, generator=generator, use_cache=use_cache, on_token=on_token)
        return [torch.cat([p, row[ids.shape[1]:]]) for p, row in zip(prompt, new)]
    steps = [prompt]
    for nxt in stream(model, prompt, max_new_tokens, padding=padding, greedy=greedy, temperature=temperature,
                      top_k=top_k, top_p=top_p, generator=generator, use_cache=use_cache):
        steps.append(nxt[:, None])
        if on_token is not None:
            on_token(nxt[:, None])
    return torch.cat(steps, dim=1)


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
