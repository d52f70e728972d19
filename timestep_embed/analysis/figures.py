"""Figures that show the sinusoid's properties: ``timestep-embed figures --out DIR [--checkpoint RUN]``.

Every figure is drawn from the core and `timestep_embed.analysis` (nothing re-derived here)
with matplotlib's Agg canvas (no display, no pyplot state) and saved as PNG. Positions are integer
indices ``0 .. positions - 1``; the default convention is ``"adm"`` (what the UNet's embedder uses).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..checks import check_int
from ..conventions import Convention, resolve_convention
from ..files import check_writable, save_figure
from ..nn.time_input import time_input
from ..sinusoidal import frequencies_np, sinusoidal_embedding_np
from . import properties
from .coverage import frequency_coverage
from .naive import naive_embedding

__all__ = ["FIGURES", "new_figure", "make_figures", "plot_time_mlp"]


def new_figure(width: float, height: float):
    """A matplotlib Figure on the Agg canvas (no display, no pyplot state), constrained layout."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # optional dependency
        raise ImportError("figures need matplotlib: pip install 'timestep-embed[plot]'") from exc
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


DIM_POS = ("dimension (column)", "position p")
MAX_POSITIONS, MAX_DIM = 5000, 8192  # a [5000, 5000] similarity matrix is 200 MB of float64
T_T = ("timestep t", "timestep t")


def _image(fig, ax, data, title, labels=DIM_POS, cmap="RdBu_r", cbar="value", lim=1.0, **kw):
    """``data [rows, cols]`` as an image (row 0 at the bottom), colour range [-lim, lim], colour bar."""
    kw = {"vmin": -lim, "vmax": lim, **kw} if lim is not None else kw
    im = ax.imshow(data, aspect="auto", origin="lower", cmap=cmap, interpolation="nearest", **kw)
    ax.set(title=title, xlabel=labels[0], ylabel=labels[1])
    fig.colorbar(im, ax=ax, label=cbar)


def _name(conv: Convention) -> str:
    a, b = (conv.first, "cos" if conv.first == "sin" else "sin")
    order = f"concat [{a} | {b}]" if conv.layout == "concat" else f"interleaved [{a}, {b}, {a}, ...]"
    scale = f", scale {conv.scale:g}" if conv.scale != 1 else ""
    return f"{order}, shift {conv.freq_shift:g}, max_period {conv.max_period:g}{scale}"


# --------------------------------------------------------------------------------- figures
def heatmap(fig, conv, dim, n):
    emb = sinusoidal_embedding_np(np.arange(n), dim, conv)
    _image(fig, fig.subplots(), emb, f"Sinusoidal embedding, {n} positions x {dim} dims\n{_name(conv)}")


def sine_curves(fig, conv, dim, n):
    p = np.arange(min(n, 300))
    ks = [k for k in (0, 4, 8, 16, 24, 32, 48) if k < dim // 2]
    if len(ks) < 2 and dim // 2 > 1:  # a narrow width: its slowest column too
        ks.append(dim // 2 - 1)
    axes = fig.subplots(len(ks), 1, sharex=True, squeeze=False)[:, 0]  # one row too (a width below 10)
    emb = sinusoidal_embedding_np(p, dim, conv)
    for ax, k, wl in zip(
        axes, ks, properties.wavelengths(dim, conv)[[conv.column_of("sin", k, dim) for k in ks]], strict=True
    ):
        ax.plot(p, emb[:, conv.column_of("sin", k, dim)], lw=1.2)
        ax.set_ylim(-1.1, 1.1)
        ax.set_ylabel(f"k={k}", rotation=0, ha="right", va="center")
        ax.text(1.0, 0.5, f" period {wl:.3g}", transform=ax.transAxes, va="center", fontsize=8)
    axes[0].set_title(
        f"sin(p w_k) columns: low k oscillate fast (fine position), high k slowly (coarse)\n{_name(conv)}, dim {dim}"
    )
    axes[-1].set_xlabel("position p")


def inverse_frequency(fig, conv, dim, n):
    ax = fig.subplots()
    k = np.arange(dim // 2)
    for shift, style in ((0.0, "-"), (1.0, "--")):
        if dim // 2 == shift:  # h - shift = 0: no frequencies at this width (check_dim)
            continue
        for mp in (10000.0, 1000.0):
            ax.plot(k, frequencies_np(dim, shift, mp), style, label=f"shift {shift:g}, max_period {mp:g}")
    ax.set_yscale("log")
    ax.set(
        title=f"Inverse frequency w_k = max_period^(-k / (h - shift)), dim {dim}, h = {dim // 2}",
        xlabel="frequency index k (dimension pair)",
        ylabel="w_k (radians per position), log scale",
    )
    inverse = lambda x: 2 * np.pi / np.maximum(x, 1e-300)  # noqa: E731  (w <-> wavelength)
    right = ax.secondary_yaxis("right", functions=(inverse, inverse))
    right.set_ylabel("wavelength 2 pi / w_k (positions)")
    ax.legend()
    ax.grid(alpha=0.3)


def vectors_20_100(fig, conv, dim, n):
    axes = fig.subplots(2, 1, sharex=True)
    for ax, p in zip(axes, (20, 100), strict=True):
        ax.bar(np.arange(dim), sinusoidal_embedding_np(p, dim, conv), width=1.0)
        ax.set(ylim=(-1.1, 1.1), ylabel="value", title=f"PE({p})")
        if conv.layout == "concat":
            ax.axvline(dim // 2 - 0.5, color="k", lw=0.8, ls=":")
    axes[0].set_title(
        f"PE(20), {_name(conv)}" + ("; dotted: the boundary of the halves" if conv.layout == "concat" else "")
    )
    axes[-1].set_xlabel("dimension (column)")


def dot_vs_offset(fig, conv, dim, n):
    ax = fig.subplots()
    span = min(100, n // 10)
    d = np.arange(-span, span + 1)
    for i, p0 in enumerate(np.linspace(span, n - 1 - span, 5).astype(int)):
        lhs, _ = properties.relative_identity(p0, p0 + d, dim, conv)
        ax.plot(d, lhs, "o", ms=9 - 1.6 * i, mfc="none", label=f"anchor p = {p0}")
    fine = np.linspace(-span, span, 2001)
    ax.plot(fine, properties.dot_by_offset(fine, dim, conv), "k-", lw=0.8, label="sum_k cos(d w_k)")
    ax.set(
        title=f"PE(p) . PE(p + d) depends on the offset d only: every anchor lies on one curve\n"
        f"{_name(conv)}, dim {dim}",
        xlabel="offset d",
        ylabel="dot product",
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def similarity(fig, conv, dim, n):
    emb = sinusoidal_embedding_np(np.arange(n), dim, conv)
    title = f"Similarity PE(p) . PE(q) / h, {n} positions: constant along diagonals (p - q)\n{_name(conv)}"
    _image(fig, fig.subplots(), emb @ emb.T / (dim // 2), title, ("position q", "position p"), cbar="PE(p).PE(q) / h")


def binary_vs_sinusoid(fig, conv, dim, n):
    p = np.arange(128)
    left, right = fig.subplots(1, 2)
    bits = naive_embedding("binary", p, 128)
    _image(fig, left, bits, "Binary code of p (7 bits, LSB first)", ("bit", "position p"), "Greys", "bit", None)
    sinusoid = sinusoidal_embedding_np(p, 32, resolve_convention(conv, layout="interleaved"))
    _image(fig, right, sinusoid, "Sinusoid, 32 dims, interleaved: the smooth analogue")


def coverage(fig, conv, dim, n):
    t = np.linspace(0, 1, 1000)
    grid = fig.add_gridspec(2, 2)
    rows = (("t in [0, 1] fed raw", conv), ("t x 1000", resolve_convention(conv, scale=1000.0 * conv.scale)))
    bottom = fig.add_subplot(grid[1, :])
    for i, (label, c) in enumerate(rows):
        emb, ax = sinusoidal_embedding_np(t, dim, c), fig.add_subplot(grid[0, i])
        _image(fig, ax, emb, label, ("dimension (column)", "t (1000 steps)"), extent=(0, dim, 0, 1))
        cov = frequency_coverage((0, 1), dim, c, warn=False)
        summary = f"{label}: {cov.slow.sum()} of {cov.slow.size} slow, {cov.aliased.sum()} aliased"
        bottom.plot(cov.cycles_over_range, "o-", ms=3, label=summary)
    bottom.axhline(0.25, color="r", ls="--", lw=0.8, label="1/4 cycle over the range (slow below)")
    bottom.axhline(500, color="m", ls=":", lw=0.8, label="1/2 cycle per step of 1/1000 (aliasing above)")
    bottom.set(
        yscale="log",
        xlabel="frequency index k",
        ylabel="cycles over t in [0, 1]",
        title=f"Frequency coverage ({_name(conv)}, dim {dim}): raw t barely moves any column",
    )
    bottom.legend(fontsize=8)
    bottom.grid(alpha=0.3)


# name -> (draw function(fig, conv, dim, n), figure size in inches)
FIGURES = {
    "heatmap": (heatmap, (8, 6)),
    "sine_curves": (sine_curves, (9, 8)),
    "inverse_frequency": (inverse_frequency, (8, 5)),
    "vectors_20_100": (vectors_20_100, (10, 5)),
    "dot_vs_offset": (dot_vs_offset, (9, 5)),
    "similarity": (similarity, (7, 6)),
    "binary_vs_sinusoid": (binary_vs_sinusoid, (10, 5)),
    "coverage": (coverage, (11, 8)),
}


def make_figures(
    out_dir,
    convention: str | Convention = "adm",
    dim: int = 128,
    positions: int = 1000,
    embedder=None,
    dpi: int = 110,
    names=None,
    embedder_title: str | None = None,
) -> list[Path]:
    """Write the figures ``names`` (default: all of `FIGURES` and ``"time_mlp"``) as
    ``out_dir/<name>.png``; ``time_mlp`` is drawn only when an ``embedder`` module is given (with
    ``embedder_title`` in its heading). Returns the paths written."""
    check_int(positions, "positions", 300), check_int(dpi, "dpi"), check_int(dim, "dim", 2)  # dim 2: one sin/cos pair
    if positions > MAX_POSITIONS or dim > MAX_DIM:  # the similarity figure is [positions, positions]
        raise ValueError(
            f"figures draw at most {MAX_POSITIONS} positions and {MAX_DIM} dims, got {positions} and {dim}"
        )
    if isinstance(names, str):
        raise TypeError(f"names must be a list of figure names, got the string {names!r}")
    names = [*FIGURES, "time_mlp"] if names is None else list(names)
    unknown = [n for n in names if n not in FIGURES and n != "time_mlp"]
    if unknown:
        raise ValueError(f"unknown figure(s) {unknown}; accepted: {[*FIGURES, 'time_mlp']}")
    want_mlp = "time_mlp" in names and embedder is not None
    names = [n for n in names if n != "time_mlp"]
    conv = resolve_convention(convention)
    properties.wavelengths(dim, conv)  # validates dim for this convention before drawing anything
    out = check_writable(Path(out_dir), "out_dir")  # before drawing
    paths = []
    for name in names:
        draw, size = FIGURES[name]
        fig = new_figure(*size)
        draw(fig, conv, dim, positions)
        paths.append(out / f"{name}.png")
        save_figure(fig, paths[-1], dpi)
    if want_mlp:
        steps = getattr(embedder, "num_timesteps", 1000)  # TimestepEmbedder's T
        path = out / "time_mlp.png"
        paths.append(plot_time_mlp(embedder, path, num_timesteps=steps, title=embedder_title, dpi=dpi))
    return paths


# ------------------------------------------------------------------ the embedding after an MLP
def _cosine_matrix(x: np.ndarray) -> np.ndarray:
    """Cosine similarity of the rows of ``x [N, d]``: ``[N, N]``."""
    unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return unit @ unit.T


def plot_time_mlp(embedder, path, *, num_timesteps: int = 1000, title: str | None = None, dpi: int = 110) -> Path:
    """Draw what ``embedder`` (a module ``t [B] -> [B, emb_dim]``, e.g. ``TimestepEmbedder``) makes of
    the indices ``0 .. num_timesteps - 1``: the input sinusoid's similarity (when it has a
    ``time_proj``), the output heatmap and the output's cosine similarity. Returns ``path``."""
    t = torch.arange(num_timesteps)
    with torch.no_grad():
        out = embedder(t).double().numpy()
        proj, kind = getattr(embedder, "time_proj", None), getattr(embedder, "time_input", "identity")
        fed = time_input(t, kind, getattr(embedder, "num_timesteps", num_timesteps))  # what time_proj sees
        feats = proj(fed).double().numpy() if proj is not None else None
    fig = new_figure(17 if feats is not None else 12, 5.5)
    axes = list(fig.subplots(1, 3 if feats is not None else 2))
    if feats is not None:
        _image(fig, axes.pop(0), _cosine_matrix(feats), "input sinusoid: cosine similarity", T_T, cbar="cosine")
    span = float(np.abs(out).max()) or 1.0
    _image(fig, axes[0], out, f"output emb [t, {out.shape[1]}]", ("embedding dimension", "timestep t"), lim=span)
    _image(fig, axes[1], _cosine_matrix(out), "output: cosine similarity", T_T, cbar="cosine")
    trained = title or "untrained (random init)"
    fig.suptitle(f"The time embedding after the MLP: {trained}")
    return save_figure(fig, path, dpi)
