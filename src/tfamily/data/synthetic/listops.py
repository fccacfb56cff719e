"""ListOps as in the Long Range Arena (Tay et al. 2021; after Nangia & Bowman 2018).

An expression is a digit 0-9 or an operator over 2..max_args nested
expressions, written prefix with a closing bracket, without parentheses:
`[MAX 2 9 [MIN 4 7 ] 0 ]` = 9. Operators: MIN, MAX, MED (median, rounded
down: LRA's `int(np.median(...))`), SM (sum modulo 10). The task is to
classify the value, 0-9.

Generation follows LRA's `generate_tree`: the root has depth 1; a node
shallower than max_depth is an operator with probability op_prob (LRA: 0.25),
else a uniform digit; an operator takes uniform 2..max_args arguments and a
uniform operator. Trees are resampled until their token count lies in
[min_length, max_length] (inclusive; LRA keeps min_length < n < max_length).
"""
from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import torch

from .base import Batch, as_generator, check_batch_size, check_bounds, check_int
from ...base.numbers import check_number

__all__ = ["ListOpsTask", "listops_eval", "listops_tokenize", "listops_detokenize", "LISTOPS_TOKENS"]

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
# Token ids: PAD = 0, digit d = d + 1, then the operators, then END.
LISTOPS_TOKENS = ("<pad>",) + tuple(str(d) for d in range(10)) + OPERATORS + (END,)
_ID = {tok: i for i, tok in enumerate(LISTOPS_TOKENS)}
PAD, DIGIT0, OP0, END_ID = 0, 1, 11, 15


def _apply(op: str, args: list[int]) -> int:
    if op == "[MIN":
        return min(args)
    if op == "[MAX":
        return max(args)
    if op == "[MED":
        s, m = sorted(args), len(args) // 2
        # Even counts average the middle pair and round down, as int(np.median) does.
        return s[m] if len(s) % 2 else (s[m - 1] + s[m]) // 2
    return sum(args) % 10


def _as_tokens(expr) -> list[str]:
    """A string, a sequence of token strings, or a sequence/tensor of token ids -> token strings."""
    if isinstance(expr, str):
        return expr.split()
    if isinstance(expr, (torch.Tensor, np.ndarray)):
        if expr.ndim != 1:
            raise ValueError(f"listops expressions are 1-D token sequences, got shape {tuple(expr.shape)}")
        expr = expr.tolist()
    if not isinstance(expr, Sequence):
        raise TypeError(f"expected a string, token strings or token ids, got {type(expr).__name__}")
    if all(isinstance(t, str) for t in expr):
        return list(expr)
    if all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in expr):
        bad = [t for t in expr if not 0 <= t < len(LISTOPS_TOKENS)]
        if bad:
            raise ValueError(f"token id {bad[0]} is not a ListOps id (valid: 0..{len(LISTOPS_TOKENS) - 1})")
        return [LISTOPS_TOKENS[t] for t in expr if t != PAD]
    raise TypeError("a listops expression must be all token strings or all token ids, not a mix")


def listops_tokenize(expr: str | Sequence[str]) -> list[int]:
    """`'[MAX 2 9 ]'` -> token ids."""
    toks = _as_tokens(expr)
    for t in toks:
        if t not in _ID or t == LISTOPS_TOKENS[PAD]:
            raise ValueError(f"unknown ListOps token {t!r}; tokens are digits 0-9, {', '.join(OPERATORS)} and ']'")
    return [_ID[t] for t in toks]


def listops_detokenize(ids) -> str:
    """Token ids (PAD dropped) -> `'[MAX 2 9 ]'`."""
    return " ".join(_as_tokens(ids if not isinstance(ids, str) else ids.split()))


def listops_eval(expr_tokens) -> int:
    """Reference evaluator: the value 0-9 of one expression.

    Accepts a string (`'[MAX 2 9 [MIN 4 7 ] 0 ]'`), a list of token strings,
    or token ids as ListOpsTask produces them (a list, or a 1-D tensor with
    PAD allowed anywhere). Malformed expressions raise ValueError.
    """
    stack: list[tuple[str, list[int]]] = []
    result = None
    for i, tok in enumerate(_as_tokens(expr_tokens)):
        if result is not None:
            raise ValueError(f"token {tok!r} at position {i} follows a complete expression")
        if tok in OPERATORS:
            stack.append((tok, []))
            continue
        if tok == END:
            if not stack:
                raise ValueError(f"']' at position {i} closes nothing")
            op, args = stack.pop()
            if not args:
                raise ValueError(f"{op} closed at position {i} has no arguments")
            value = _apply(op, args)
        elif tok.isdigit() and len(tok) == 1:
            value = int(tok)
        else:
            raise ValueError(f"unknown ListOps token {tok!r} at position {i}")
        if stack:
            stack[-1][1].append(value)
        else:
            result = value
    if stack:
        raise ValueError(f"{len(stack)} operator(s) not closed with ']'")
    if result is None:
        raise ValueError("empty ListOps expression")
    return result


class _TooLong(Exception):
    pass


class ListOpsTask:
    """LRA ListOps: classify the value (0-9) of a random nested expression.

    Tokens: PAD = 0, digit d = d + 1 (ids 1-10), [MIN = 11, [MAX = 12,
    [MED = 13, [SM = 14, ] = 15 (vocab_size = 16; `LISTOPS_TOKENS[id]` is
    the text). Inputs are right-padded to seq_len = max_length. Defaults
    are LRA's: max_depth 10, max_args 10, lengths 500..2000.
    """

    name, kind = "listops", "classification"
    PAD = PAD
    vocab_size = len(LISTOPS_TOKENS)
    n_classes = 10
    max_tries = 100_000

    def __init__(self, max_depth: int = 10, max_args: int = 10, min_length: int = 500, max_length: int = 2000,
                 op_prob: float = 0.25):
        self.max_depth = check_int(self.name, "max_depth", max_depth, 1)
        self.max_args = check_int(self.name, "max_args", max_args, 2)
        self.min_length = check_int(self.name, "min_length", min_length, 1)
        self.max_length = check_int(self.name, "max_length", max_length, 1)
        check_bounds(self.name, "min_length", self.min_length, "max_length", self.max_length)
        check_number(f"{self.name}: op_prob", op_prob, 0.0, 1.0)
        self.op_prob = float(op_prob)
        lo, hi = self._reachable_lengths()
        if hi < self.min_length or lo > self.max_length:
            raise ValueError(
                f"{self.name}: with max_depth={self.max_depth}, max_args={self.max_args}, op_prob={self.op_prob} "
                f"trees have {lo}..{hi} tokens, outside [min_length={self.min_length}, max_length={self.max_length}]; "
                "raise max_depth/max_args or change the length bounds"
            )
        self.seq_len = self.max_length

    def _reachable_lengths(self) -> tuple[int, int]:
        """Fewest and most tokens a tree can have (capped just past max_length)."""
        cap = self.max_length + 1
        lo = hi = 1  # a node at max_depth is always a digit
        for _ in range(self.max_depth - 1):
            hi = min(cap, 2 + self.max_args * hi) if self.op_prob > 0 else 1
            lo = min(cap, 2 + 2 * lo) if self.op_prob == 1.0 else 1
        return lo, hi

    def _tree(self, rng: random.Random, depth: int, out: list[int]) -> int:
        """Append one random expression's ids to `out`; return its value."""
        if depth < self.max_depth and rng.random() < self.op_prob:
            op = rng.randrange(len(OPERATORS))
            out.append(OP0 + op)
            args = [self._tree(rng, depth + 1, out) for _ in range(rng.randint(2, self.max_args))]
            out.append(END_ID)
            value = _apply(OPERATORS[op], args)
        else:
            value = rng.randrange(10)
            out.append(DIGIT0 + value)
        if len(out) > self.max_length:
            raise _TooLong  # abandon early: it will be rejected anyway
        return value

    def sample_expression(self, rng: random.Random) -> tuple[list[int], int]:
        """One (token ids, value) within the length bounds, by rejection."""
        for _ in range(self.max_tries):
            out: list[int] = []
            try:
                value = self._tree(rng, 1, out)
            except _TooLong:
                continue
            if len(out) >= self.min_length:
                return out, value
        raise RuntimeError(
            f"{self.name}: no tree with {self.min_length}..{self.max_length} tokens in {self.max_tries} tries "
            f"(max_depth={self.max_depth}, max_args={self.max_args}, op_prob={self.op_prob}); widen the bounds"
        )

    def sample(self, batch_size: int, generator: torch.Generator | int) -> Batch:
        b = check_batch_size(self.name, batch_size)
        g = as_generator(generator)
        # Trees are recursive Python, so draw one seed from the torch generator
        # for a Python RNG: still a pure function of the generator's state.
        rng = random.Random(int(torch.randint(0, 2**62, (1,), generator=g)))
        inp = torch.full((b, self.max_length), PAD, dtype=torch.long)
        target = torch.empty(b, dtype=torch.long)
        for i in range(b):
            ids, target[i] = self.sample_expression(rng)
            inp[i, : len(ids)] = torch.tensor(ids)
        return Batch(inp, target, torch.ones(b, dtype=torch.bool), inp != PAD)
