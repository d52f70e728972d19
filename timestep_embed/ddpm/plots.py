"""A run's pictures: tiled samples with a caption, and the loss curve.

Drawn on matplotlib's Agg canvas ([`new_figure`][timestep_embed.analysis.figures.new_figure]: no display, no
pyplot state) and written atomically.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np

from ..analysis.figures import new_figure
from ..files import save_figure

__all__ = ["tile_samples", "save_samples_png", "save_loss_curve"]


def tile_samples(samples, nrow: int = 10) -> np.ndarray:
    """``samples`` [N, 1, H, W] in [-1, 1] as one image [rows * (H + 2) + 2, nrow * (W + 2) + 2]."""
    x = np.asarray(samples, dtype=np.float32)[:, 0]
    n, h, w = x.shape
    rows = -(-n // nrow)
    tiled = np.full((rows * (h + 2) + 2, nrow * (w + 2) + 2), -1.0, dtype=np.float32)
    for i in range(n):
        r, c = divmod(i, nrow)
        tiled[2 + r * (h + 2) : 2 + r * (h + 2) + h, 2 + c * (w + 2) : 2 + c * (w + 2) + w] = x[i]
    return tiled


def save_samples_png(samples, path, nrow: int = 10, caption: str = "", zoom: int = 2) -> Path:
    """A PNG of ``samples`` [N, 1, H, W] in [-1, 1] (white digits on black, as MNIST), ``zoom``
    screen pixels per image pixel, with ``caption`` above the tiles, wrapped onto as many lines as the
    image's width needs."""
    tiled = tile_samples(samples, nrow)
    dpi, points = 100, 7.0
    width, height = tiled.shape[1] * zoom / dpi, tiled.shape[0] * zoom / dpi  # inches
    # 0.6 em a character is wider than DejaVu Sans on average (digits 0.64 em, lowercase ~0.55, space
    # 0.32), so a wrapped line stays inside the figure.
    lines = textwrap.wrap(caption, max(12, int(0.95 * width * 72 / (0.6 * points))))
    head = (len(lines) * 1.25 * points + 5) / 72 if lines else 0.0
    fig = new_figure(width, height + head)
    fig.set_layout_engine("none")  # the tiles fill the width pixel for pixel; the caption band sits above
    ax = fig.add_axes((0, 0, 1, height / (height + head)))
    ax.imshow((tiled + 1) / 2, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    ax.set_axis_off()
    if lines:
        fig.text(0.5, 1 - 2.5 / 72 / (height + head), "\n".join(lines), ha="center", va="top", fontsize=points)
    return save_figure(fig, path, dpi)


def save_loss_curve(log_path, png_path, ylabel: str = "training loss (MSE)") -> Path | None:
    """Loss against step from a training ``log.jsonl``, with a running geometric mean (the mean of
    log-loss over a centred window, which is what a log axis shows); None for an empty log."""
    recs = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    if not recs:
        return None
    steps, loss = np.array([r["step"] for r in recs]), np.array([r["loss"] for r in recs])
    fig = new_figure(6, 3.5)
    ax = fig.add_subplot()
    ax.plot(steps, loss, lw=1, alpha=0.5, label="loss (mean over the log interval)")
    k = max(1, len(loss) // 10) | 1  # odd, so the window is centred on a logged step
    if k >= 3:
        smooth = np.exp(np.convolve(np.log(np.maximum(loss, 1e-12)), np.ones(k) / k, mode="valid"))
        ax.plot(steps[k // 2 : len(loss) - k // 2], smooth, lw=2, label=f"running geometric mean ({k} points)")
    ax.set(xlabel="step", ylabel=ylabel, yscale="log", title="DDPM training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, png_path, 120)
