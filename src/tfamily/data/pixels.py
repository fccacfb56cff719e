"""Images as autoregressive pixel sequences (van den Oord et al. 2016; Parmar et al. 2018).

An image of ``H x W`` intensities becomes ``H * W`` tokens: each intensity is
quantised to one of ``levels`` values (256 keeps all 8 bits) and the pixels are
listed in a generation order, raster (row by row) or block-raster (Parmar et al.
2018, fig. 2: ``block_h x block_w`` blocks in raster order, raster order inside a
block, the order the local 2D pattern assumes).

The model's input is the sequence shifted right by one with a constant 0 in front
(as tensor2tensor's ``shift_right``), so the vocabulary is exactly the ``levels``
values and the softmax over it is a proper distribution: its negative
log-likelihood, in nats / ln 2 per pixel, is the bits per dimension of the image
under that quantisation.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..base.numbers import check_int

__all__ = ["PixelOrder", "PixelSequences", "quantize", "dequantize", "bits_per_dim", "to_block_raster",
           "from_block_raster"]


def _check_levels(levels) -> None:
    check_int("levels", levels, 2, 256, hint="256 keeps all 8 bits")


def quantize(images, levels: int) -> Tensor:
    """uint8 intensities 0..255 -> long tokens 0..levels-1 (equal-width bins, floor(x * levels / 256))."""
    _check_levels(levels)
    x = torch.as_tensor(np.asarray(images) if not isinstance(images, Tensor) else images)
    if x.dtype != torch.uint8:
        raise TypeError(f"images must be uint8 intensities 0..255, got dtype {x.dtype}")
    return torch.div(x.long() * levels, 256, rounding_mode="floor")


def dequantize(tokens: Tensor, levels: int) -> Tensor:
    """Tokens -> uint8 intensities at the centre of each bin (0 and 255 stay the ends)."""
    _check_levels(levels)
    if levels == 256:
        return tokens.clamp(0, 255).to(torch.uint8)
    return (tokens.clamp(0, levels - 1).float() * 255.0 / (levels - 1)).round().to(torch.uint8)


def to_block_raster(image: Tensor, block_h: int, block_w: int) -> Tensor:
    """``(..., H, W) -> (..., H * W)`` in block-raster order (Parmar et al. 2018, fig. 2)."""
    hh, ww = image.shape[-2:]
    if hh % block_h or ww % block_w:
        raise ValueError(f"image {hh}x{ww} does not tile into {block_h}x{block_w} blocks")
    x = image.reshape(*image.shape[:-2], hh // block_h, block_h, ww // block_w, block_w)
    return x.transpose(-3, -2).reshape(*image.shape[:-2], hh * ww)


def from_block_raster(seq: Tensor, height: int, width: int, block_h: int, block_w: int) -> Tensor:
    """Inverse of ``to_block_raster``: ``(..., H * W) -> (..., H, W)``."""
    x = seq.reshape(*seq.shape[:-1], height // block_h, width // block_w, block_h, block_w)
    return x.transpose(-3, -2).reshape(*seq.shape[:-1], height, width)


@dataclass(frozen=True)
class PixelOrder:
    """Raster order (``block=None``) or block-raster order with ``block = (block_h, block_w)``."""

    height: int = 28
    width: int = 28
    block: tuple[int, int] | None = None

    def __post_init__(self):
        for name, v in (("height", self.height), ("width", self.width)):
            check_int(f"PixelOrder: {name}", v, 1)
        if self.block is not None:
            bh, bw = self.block
            if self.height % bh or self.width % bw:
                raise ValueError(f"PixelOrder: block {bh}x{bw} does not tile a {self.height}x{self.width} image; "
                                 f"pick block sides dividing the image sides")

    @property
    def name(self) -> str:
        return "raster" if self.block is None else f"block_raster_{self.block[0]}x{self.block[1]}"

    def to_sequence(self, images: Tensor) -> Tensor:
        """``(..., H, W) -> (..., H * W)`` in this order."""
        if tuple(images.shape[-2:]) != (self.height, self.width):
            raise ValueError(f"images are {tuple(images.shape[-2:])}, this order is for "
                             f"{(self.height, self.width)}")
        if self.block is None:
            return images.flatten(-2)
        return to_block_raster(images, *self.block)

    def to_images(self, seqs: Tensor) -> Tensor:
        """Inverse of ``to_sequence``: ``(..., H * W) -> (..., H, W)``."""
        if seqs.shape[-1] != self.height * self.width:
            raise ValueError(f"sequences have {seqs.shape[-1]} pixels, expected {self.height * self.width}")
        if self.block is None:
            return seqs.reshape(*seqs.shape[:-1], self.height, self.width)
        return from_block_raster(seqs, self.height, self.width, *self.block)


class PixelSequences:
    """A set of images as ``(n, H * W)`` long tokens, batched as ``{"x", "y"}`` next-pixel pairs.

    ``x`` is ``y`` shifted right by one with the constant ``start`` (0) in front; a
    causal LM scoring ``y`` from ``x`` therefore models every pixel, the first included.
    """

    start = 0

    def __init__(self, images, levels: int, order: PixelOrder):
        q = quantize(images, levels)
        if q.dim() != 3:
            raise ValueError(f"images must be (n, H, W), got shape {tuple(q.shape)}")
        self.levels, self.order = levels, order
        self.tokens = order.to_sequence(q).contiguous()

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def vocab_size(self) -> int:
        return self.levels

    @property
    def seq_len(self) -> int:
        return self.tokens.shape[1]

    def pairs(self, y: Tensor) -> dict:
        x = torch.cat([torch.full_like(y[:, :1], self.start), y[:, :-1]], dim=1)
        return {"x": x, "y": y}

    def batch(self, index: Tensor) -> dict:
        return self.pairs(self.tokens[index])

    def random_batch(self, batch_size: int, generator: torch.Generator) -> dict:
        return self.batch(torch.randint(len(self), (batch_size,), generator=generator))

    def eval_batches(self, batch_size: int, limit: int | None = None) -> Iterator[dict]:
        """One pass, in order, over the first ``limit`` images (all when None)."""
        n = len(self) if limit is None else min(limit, len(self))
        for i in range(0, n, batch_size):
            yield self.pairs(self.tokens[i:min(i + batch_size, n)])

    def to_images(self, seqs: Tensor) -> Tensor:
        """Sampled token sequences -> uint8 images for display."""
        return dequantize(self.order.to_images(seqs), self.levels)


def bits_per_dim(nll_nats_sum: float, n_pixels: int) -> float:
    """Summed negative log-likelihood in nats -> bits per pixel."""
    return nll_nats_sum / (n_pixels * math.log(2))
