"""Arithmetic tasks: multi-digit addition (lm) and parity (classification)."""
from __future__ import annotations

import torch

from .base import Batch, as_generator, check_batch_size, check_int, check_lengths, lm_pair
from ...base.numbers import check_flag

__all__ = ["AdditionTask", "ParityTask"]


class AdditionTask:
    """`a + b = c` written digit by digit; the loss covers the digits of c.

    Tokens: digits 0-9 are ids 0-9, PLUS = 10, EQ = 11 (vocab_size = 12).
    a and b have a digit count uniform in 1..n_digits and are zero-padded on
    the left to n_digits; c has n_digits + 1 digits (room for the carry),
    most significant first, or least significant first with reverse_sum=True
    (which lets a causal model emit each digit after the carry it needs).
    The full sequence `a + b = c` has 3 * n_digits + 3 tokens; input and
    target have seq_len = 3 * n_digits + 2.
    """

    name, kind = "addition", "lm"
    PLUS, EQ = 10, 11
    vocab_size = 12

    def __init__(self, n_digits: int = 3, reverse_sum: bool = False):
        self.n_digits = check_int(self.name, "n_digits", n_digits, 1)
        check_flag(f"{self.name}: reverse_sum", reverse_sum)
        self.reverse_sum = reverse_sum
        self.seq_len = 3 * self.n_digits + 2

    def _operand(self, b: int, g: torch.Generator) -> torch.Tensor:
        """(b, n_digits) digits, most significant first, of numbers with 1..n_digits digits."""
        n = self.n_digits
        digits = torch.randint(0, 10, (b, n), generator=g)
        count = torch.randint(1, n + 1, (b, 1), generator=g)
        return torch.where(torch.arange(n) >= n - count, digits, torch.zeros_like(digits))

    def sample(self, batch_size: int, generator: torch.Generator | int) -> Batch:
        b = check_batch_size(self.name, batch_size)
        g = as_generator(generator)
        n = self.n_digits
        lhs, rhs = self._operand(b, g), self._operand(b, g)
        # Schoolbook addition from the least significant digit: exact for any
        # n_digits, where int64 arithmetic would overflow past 18 digits.
        total = torch.zeros(b, n + 1, dtype=torch.long)
        carry = torch.zeros(b, dtype=torch.long)
        for i in range(n - 1, -1, -1):
            s = lhs[:, i] + rhs[:, i] + carry
            total[:, i + 1], carry = s % 10, s // 10
        total[:, 0] = carry
        if self.reverse_sum:
            total = total.flip(1)
        plus = torch.full((b, 1), self.PLUS, dtype=torch.long)
        eq = torch.full((b, 1), self.EQ, dtype=torch.long)
        inp, tgt = lm_pair(torch.cat([lhs, plus, rhs, eq, total], dim=1))
        # Targets 2n+1 .. 3n+1 are the n + 1 digits of the sum (tokens 2n+2 ..).
        loss_mask = (torch.arange(self.seq_len) >= 2 * n + 1).expand(b, -1)
        return Batch(inp, tgt, loss_mask.clone(), torch.ones_like(inp, dtype=torch.bool))


class ParityTask:
    """Graves 2016 (Adaptive Computation Time), section 3.1, as tokens.

    Graves feeds a 64-vector of -1/0/+1 entries and asks for the parity of
    the count of +1s; here the input is a binary string of length uniform in
    [min_len, max_len] and the class is the parity of its number of 1s.
    Tokens: PAD = 0, bit 0 = 1, bit 1 = 2 (vocab_size = 3); inputs are padded
    on the right to seq_len = max_len. Classes: 0 (even), 1 (odd).
    """

    name, kind = "parity", "classification"
    PAD, ZERO, ONE = 0, 1, 2
    vocab_size = 3
    n_classes = 2

    def __init__(self, min_len: int = 1, max_len: int = 64):
        self.min_len, self.max_len = check_lengths(self.name, min_len, max_len)
        self.seq_len = self.max_len

    def sample(self, batch_size: int, generator: torch.Generator | int) -> Batch:
        b = check_batch_size(self.name, batch_size)
        g = as_generator(generator)
        bits = torch.randint(0, 2, (b, self.max_len), generator=g)
        lengths = torch.randint(self.min_len, self.max_len + 1, (b, 1), generator=g)
        valid = torch.arange(self.max_len) < lengths
        bits = bits * valid
        inp = torch.where(valid, bits + self.ZERO, torch.full_like(bits, self.PAD))
        target = bits.sum(dim=1) % 2
        return Batch(inp, target, torch.ones(b, dtype=torch.bool), valid)
