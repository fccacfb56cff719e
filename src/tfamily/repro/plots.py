"""Figures for the reproductions: image grids and learning curves (matplotlib, Agg)."""
from __future__ import annotations

import math
from pathlib import Path

from torch import Tensor

from ..base.plotting import pyplot, save_figure


def save_grid(images: Tensor, path: Path, title: str) -> None:
    plt = pyplot()
    n = len(images)
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(4.0, cols * 1.2), rows * 1.2 + 0.5), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i < n:
            ax.imshow(images[i].numpy(), cmap="gray", vmin=0, vmax=255)
    fig.suptitle(title, fontsize=8)
    save_figure(fig, path, dpi=100)


def save_curves(curve: list[dict], rows: list[dict], path: Path) -> None:
    plt = pyplot()
    from matplotlib.ticker import FormatStrFormatter
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        pts = [c for c in curve if c["model"] == r["model"]]
        line, = ax.plot([c["train_s"] for c in pts], [c["curve_test_bpd"] for c in pts], "o-",
                        label=f"{r['model']} ({r['steps']} steps): {r['test_bpd']:.3f} on "
                              f"{r['test_images']} test images")
        seen = [c for c in pts if c["train_bpd"] is not None]
        ax.plot([c["train_s"] for c in seen], [c["train_bpd"] for c in seen], ":", color=line.get_color())
    ax.set_xlabel("training seconds")
    ax.set_ylabel("bits per dimension")
    ax.set_yscale("log")
    for axis_fmt in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis_fmt(FormatStrFormatter("%g"))
    ax.set_title(f"MNIST pixels, {rows[0]['levels']} levels: test bpd on the first curve images (solid),\n"
                 f"mean train bpd since the previous point (dotted)",
                 fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path, dpi=100)


def save_bars(rows: list[dict], key: str, label: str, path: Path, title: str, note: str | None = None) -> None:
    """One bar per row (``row['member']``) of ``row[key]``, annotated with ``row[note]``."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(rows)), 3.5))
    bars = ax.bar(range(len(rows)), [r[key] for r in rows], color="tab:blue")
    ax.set_xticks(range(len(rows)), [r["member"] for r in rows], rotation=20, ha="right", fontsize=7)
    if note is not None:
        for bar, r in zip(bars, rows):
            ax.annotate(f"{r[note]:.0f} s", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.set_ylabel(label)
    ax.set_title(title, fontsize=8)
    save_figure(fig, path, dpi=100)


def save_bpc_curves(lines: list[tuple[str, list[dict]]], path: Path, title: str, target: float | None = None) -> None:
    """Validation bpc against training seconds: ``lines`` is ``[(label, points)]`` with points
    ``{"train_s", "val_bpc"}``; ``target`` draws a dotted horizontal line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, pts in lines:
        pts = [c for c in pts if c["val_bpc"] is not None]
        ax.plot([c["train_s"] for c in pts], [c["val_bpc"] for c in pts], "o-", markersize=3, label=label)
    if target is not None:
        ax.axhline(target, color="grey", ls=":", lw=1, label=f"target {target:.3f} bpc")
    ax.set_xlabel("training seconds")
    ax.set_ylabel("validation bits per character")
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path, dpi=100)
