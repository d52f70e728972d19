"""Which convention produced these embeddings?

[`detect_convention`][timestep_embed.detect_convention] takes an ``[N, dim]`` matrix of embeddings at known timesteps
(dumped from any codebase) or a callable, and searches (1) a grid of the conventions codebases use,
with timesteps optionally rounded to bfloat16/float16 first, then (2) a continuous fit of
``scale`` and the frequency decay (``max_period``) for every layout/order. It reports the best
candidate, its max abs residual, and says plainly when nothing matches.

[`diff_report`][timestep_embed.diff_report] compares two implementations and names the
likely cause. CLI: ``timestep-embed detect EMB.npy --timesteps (T.npy | start:stop[:step])``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ..checks import check_real
from ..conventions import PRESETS, Convention
from ..sinusoidal import frequencies_np
from .dump import read_dump

__all__ = ["Detection", "detect_convention"]

# The grid: what real codebases use (see conventions.PRESETS); scale 1000 = t in [0, 1] times 1000
# inside the embedding (Flux `time_factor`).
GRID_SHIFTS = (0.0, 1.0)
GRID_PERIODS = (10000.0, 1000.0, 100.0, 10.0)
GRID_SCALES = (1.0, 1000.0)
ROUNDINGS = {None: None, "bfloat16": torch.bfloat16, "float16": torch.float16}
# t rounded to the dtype and scale * t formed in it (black-forest-labs/flux `time_factor * t` in bfloat16)
SCALED_ROUNDINGS = {f"{name}, scale * t formed in {name}": name for name in ("bfloat16", "float16")}
MIN_TIMESTEPS = 4  # fewer rows cannot tell the candidates apart
_PRESET_ORDER = ("vaswani", "ddpm", "adm", "mae", "edm", "edm_song", "ldm", "dit", "diffusers", "diffusers_unet")


@dataclass
class Detection:
    """Result of [`detect_convention`][timestep_embed.detect_convention].

    ``convention`` is the best candidate even when ``matched`` is False; ``residual`` its max abs
    difference to the data; ``rounding`` names the dtype the timesteps were rounded to before
    the embedding (None: not rounded); ``presets`` the preset names equal to ``convention``.
    """

    matched: bool
    convention: Convention | None
    residual: float
    tolerance: float
    rounding: str | None = None
    presets: tuple[str, ...] = ()
    fitted: bool = False
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.convention is None:
            return "no match: " + "; ".join(self.notes)
        c = self.convention
        head = "match" if self.matched else "NO MATCH (closest candidate below)"
        lines = [
            f"{head}: residual {self.residual:.3g} (tolerance {self.tolerance:.3g})",
            f"  layout={c.layout} first={c.first} freq_shift={c.freq_shift:g} "
            f"max_period={c.max_period:.6g} scale={c.scale:.6g}" + (f" gain={c.gain:.6g}" if c.gain != 1 else ""),
            f"  presets: {', '.join(self.presets) or 'none'}",
            f"  timesteps rounded to: {self.rounding or 'not rounded'}",
            f"  found by: {'continuous fit' if self.fitted else 'grid search'}",
        ]
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])


def _presets_of(conv: Convention) -> tuple[str, ...]:
    return tuple(n for n in _PRESET_ORDER if PRESETS[n] == conv)


def _columns(emb: np.ndarray, layout: str, first: str) -> tuple[np.ndarray, np.ndarray]:
    """The columns that would be sin and cos [N, h] under a layout/order hypothesis."""
    h = emb.shape[1] // 2
    a, b = (emb[:, :h], emb[:, h : 2 * h]) if layout == "concat" else (emb[:, 0 : 2 * h : 2], emb[:, 1 : 2 * h : 2])
    return (a, b) if first == "sin" else (b, a)


def _phase_error(s, c, t, omega) -> float:
    args = t[:, None] * omega[None, :]
    return float(max(np.abs(s - np.sin(args)).max(initial=0), np.abs(c - np.cos(args)).max(initial=0)))


def _round(t: np.ndarray, name) -> np.ndarray:
    if name is None:
        return t
    return torch.from_numpy(t).to(ROUNDINGS[name]).double().numpy()


def _scaled(t: np.ndarray, rounding, scale: float) -> np.ndarray:
    """``scale * t`` as a codebase forms it: in float64, after rounding t, or in the rounded dtype."""
    if rounding in SCALED_ROUNDINGS:
        dtype = ROUNDINGS[SCALED_ROUNDINGS[rounding]]
        return (scale * torch.from_numpy(t).to(dtype)).double().numpy()
    return scale * _round(t, rounding)


def _gain(emb: np.ndarray) -> float:
    """The common length of the (sin, cos) pairs when it is the same for every pair and row, else 1."""
    h = emb.shape[1] // 2
    best = (math.inf, 1.0)
    for a, b in ((emb[:, :h], emb[:, h : 2 * h]), (emb[:, 0 : 2 * h : 2], emb[:, 1 : 2 * h : 2])):
        r = np.sqrt(a**2 + b**2)
        middle = float(np.median(r))
        if middle > 0:
            best = min(best, (float(r.max() - r.min()) / middle, middle))
    spread, gain = best
    return gain if spread < 1e-3 and abs(gain - 1) > 1e-3 else 1.0


def _grid_search(emb, t, tol_for):
    if emb.shape[0] > 1024:  # the grid only has to tell candidates apart: fewer rows suffice
        pick = np.linspace(0, emb.shape[0] - 1, 1024).round().astype(int)
        emb, t = emb[pick], t[pick]
    h, results = emb.shape[1] // 2, []
    hypotheses = list(itertools.product(("concat", "interleaved"), ("sin", "cos")))
    columns = {hyp: _columns(emb, *hyp) for hyp in hypotheses}
    roundings = [*ROUNDINGS, *SCALED_ROUNDINGS]
    for shift, period, scale, rounding in itertools.product(GRID_SHIFTS, GRID_PERIODS, GRID_SCALES, roundings):
        if h - shift <= 0 or (scale == 1 and rounding in SCALED_ROUNDINGS):
            continue
        args = _scaled(t, rounding, scale)[:, None] * frequencies_np(2 * h, shift, period)[None, :]
        if not np.isfinite(args).all():  # scale * t overflows that dtype (float16 ends at 65504)
            continue
        sin, cos = np.sin(args), np.cos(args)
        for layout, first in hypotheses:
            s, c = columns[(layout, first)]
            err = float(max(np.abs(s - sin).max(initial=0), np.abs(c - cos).max(initial=0)))
            conv = Convention(layout, first, shift, period, scale)
            results.append((err, rounding is not None, conv, rounding))
    results.sort(key=lambda r: (r[0] > tol_for(r[2]), r[0] if r[0] > tol_for(r[2]) else 0, r[1], r[0]))
    return results


def _fit_frequencies(s, c, t):
    """Per-k angular frequency by unwrapping the phase along sorted t; NaN where unreliable."""
    order = np.argsort(t)
    ts, phase = t[order], np.arctan2(s[order], c[order])
    ts, phase = np.concatenate([[0.0], ts]), np.concatenate([np.zeros((1, s.shape[1])), phase])
    unwrapped = np.unwrap(phase, axis=0)
    denom = float(ts @ ts)
    if denom == 0:
        return np.full(s.shape[1], np.nan)
    omega = (ts @ unwrapped) / denom  # least squares through the origin: phase(0) = 0
    misfit = np.abs(unwrapped - ts[:, None] * omega[None, :]).max(axis=0)
    omega[misfit > 1e-2] = np.nan
    return omega


def _continuous_fit(emb, t):
    """Best (error, Convention) over layouts/orders with scale and decay fitted to the data."""
    h, best = emb.shape[1] // 2, None
    k = np.arange(h, dtype=np.float64)
    for layout, first in itertools.product(("concat", "interleaved"), ("sin", "cos")):
        s, c = _columns(emb, layout, first)
        omega = _fit_frequencies(s, c, t)
        ok = np.isfinite(omega) & (omega > 0)
        if ok.sum() < 2 or h < 2:
            continue
        slope, intercept = np.polyfit(k[ok], np.log(omega[ok]), 1)  # ln w_k = ln(scale) - k ln(P) / h
        if slope >= 0:
            continue
        scale, period = float(np.exp(intercept)), float(np.exp(-slope * h))
        conv = Convention(layout, first, 0.0, period, scale)
        err = _phase_error(s, c, t, scale * frequencies_np(2 * h, 0.0, period))
        if best is None or err < best[0]:
            best = (err, conv)
    return best


def _snap(conv: Convention, h: int) -> Convention:
    """Round fitted values to the grid's when they are that value up to fitting noise."""
    scale = next((g for g in GRID_SCALES if math.isclose(conv.scale, g, rel_tol=1e-4)), conv.scale)
    decay = math.log(conv.max_period) / h
    for shift, period in itertools.product(GRID_SHIFTS, GRID_PERIODS):
        if h - shift > 0 and math.isclose(decay, math.log(period) / (h - shift), rel_tol=1e-4):
            return Convention(conv.layout, conv.first, shift, period, scale)
    return Convention(conv.layout, conv.first, 0.0, conv.max_period, scale)


def detect_convention(source, timesteps=None, *, tol: float = 1e-3) -> Detection:
    """Identify layout, order, freq_shift, max_period and scale of sinusoidal embeddings.

    Args:
        source: ``[N, dim]`` array/tensor of embeddings (a memory map too: at most 2048 rows spread
            over it are read, see `timestep_embed.analysis.dump`), or a callable
            ``t [n] -> [n, dim]`` (called with float32 timesteps, or int64 if floats raise).
        timesteps: the ``[N]`` timesteps of the rows (default for a callable: 0..999).
        tol: max abs residual that counts as a match, plus the float32 argument error
            ``3e-7 * max|scale * t|`` (capped at 0.5: float32 implementations differ from
            float64 by that) and the machine epsilon of the dump (bfloat16 dumps: 2 ** -7).

    Returns:
        [`Detection`][timestep_embed.Detection]. ``freq_shift`` and ``max_period`` are only jointly identifiable
        (``ln(max_period) / (h - freq_shift)``); the grid prefers max_period 10000.
    """
    tol = check_real(tol, "tol", positive=True)
    emb, t, eps = read_dump(source, timesteps)
    distinct = np.unique(t)
    if len(distinct) < MIN_TIMESTEPS or not distinct.any():
        raise ValueError(
            f"not enough data: {len(distinct)} distinct timestep(s) {distinct[:4].tolist()}; the detector needs at "
            f"least {MIN_TIMESTEPS} distinct ones, not all zero (every convention is [1, 0, ...] patterns at t = 0)"
        )
    h, notes = emb.shape[1] // 2, []
    t_max = float(np.abs(t).max(initial=0.0))
    gain = _gain(emb)
    emb = emb / gain  # the search runs on unit (sin, cos) pairs; residuals are reported in the data's units

    def tol_for(conv):
        return (tol + eps) / gain + min(3e-7 * t_max * conv.scale, 0.5)

    if emb.shape[1] % 2 == 1 and np.abs(emb[:, -1]).max() > tol:
        notes.append("odd width but the last column is not zero (diffusers pads odd widths with zeros)")
    grid = _grid_search(emb, t, tol_for)
    _, _, conv, rounding = grid[0]
    s, c = _columns(emb, conv.layout, conv.first)  # the residual on every row: the search saw at most 1024
    err = _phase_error(s, c, _scaled(t, rounding, conv.scale), frequencies_np(2 * h, conv.freq_shift, conv.max_period))
    fitted = False
    if err > tol_for(conv):
        fit = _continuous_fit(emb, t)
        if fit is not None and fit[0] < err:
            snapped = _snap(fit[1], h)
            s, c = _columns(emb, snapped.layout, snapped.first)
            snapped_err = _phase_error(
                s, c, t, snapped.scale * frequencies_np(2 * h, snapped.freq_shift, snapped.max_period)
            )
            err, conv = (snapped_err, snapped) if snapped_err <= fit[0] + tol else fit
            rounding, fitted = None, True
    matched = err <= tol_for(conv)
    if gain != 1:
        conv = replace(conv, gain=gain)
        notes.append(f"an output gain of {gain:.6g} (x-transformers' ScaledSinusoidalEmbedding starts at dim ** -0.5)")
    if matched and rounding is not None:
        notes.append(f"the timesteps were rounded to {rounding} before the embedding (bf16 turns 999 into 1000)")
    if matched and fitted:
        notes.append("not a grid value: max_period/scale fitted continuously; max_period is quoted for freq_shift=0")
    if matched and conv.freq_shift == 1.0:
        notes.append(f"equivalently freq_shift=0 with max_period={conv.max_period ** (h / (h - 1)):.6g}")
    if not matched:
        pair = _columns(emb, conv.layout, "sin")
        norm = float(np.abs(pair[0] ** 2 + pair[1] ** 2 - 1).max())
        notes.append(f"nothing matches within {tol_for(conv):.3g}; the closest candidate is off by {err:.3g}")
        if norm > 0.05:
            notes.append(f"the columns are not sin/cos pairs of one angle (|sin^2 + cos^2 - 1| up to {norm:.3g})")
    return Detection(
        bool(matched),
        conv,
        float(err) * gain,
        tol_for(conv) * gain,
        rounding if matched else None,
        _presets_of(replace(conv, gain=1.0)),
        fitted,
        notes,
    )
