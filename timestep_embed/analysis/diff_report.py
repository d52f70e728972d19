"""Compare two sinusoidal-embedding implementations over a grid and name the likely cause.

The causes checked are the bugs seen in the wild: sin/cos halves swapped when porting,
concatenated vs interleaved columns, ``half`` vs ``half - 1`` in the frequency exponent
(freq_shift 0 vs 1), a different max_period or scale, and timesteps rounded to
bfloat16/float16 before the embedding (bf16 turns 999 into 1000).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..checks import check_real, real_array
from ..conventions import PRESETS, Convention, layout_permutation, resolve_convention
from ..guards import check_dim
from ..sinusoidal import sinusoidal_embedding
from .detect import MIN_TIMESTEPS, Detection, detect_convention

__all__ = ["DiffReport", "diff_report", "embedding_causes"]

_FIELD_CAUSES = {
    "layout": "concatenated vs interleaved sin/cos columns",
    "first": "sin and cos halves swapped (diffusers' flip_sin_to_cos)",
    "freq_shift": "half vs half - 1 in the frequency exponent (diffusers' downscale_freq_shift 0 vs 1)",
    "max_period": "a different max_period",
    "scale": "a different scale of the argument (e.g. t in [0, 1] vs t * 1000)",
}


@dataclass
class DiffReport:
    """Where two implementations differ over ``timesteps`` and the likely cause.

    ``max_abs``/``mean_abs``: over all entries; ``worst_timestep``/``worst_column``: where the
    max is; ``rows``: timesteps whose max difference exceeds ``tol``; ``columns``: the column
    indices that differ anywhere; ``causes``: human-readable likely causes (empty: identical).
    """

    max_abs: float
    mean_abs: float
    tol: float
    worst_timestep: float
    worst_column: int
    rows: np.ndarray
    columns: np.ndarray
    causes: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.max_abs <= self.tol

    def summary(self) -> str:
        if self.identical:
            return f"identical within {self.tol:g} (max abs difference {self.max_abs:.3g})"
        cols = self.columns
        col_text = f"{len(cols)} columns ({cols[0]}..{cols[-1]})" if len(cols) else "no column"
        rows = ", ".join(f"{t:g}" for t in self.rows[:8]) + (" ..." if len(self.rows) > 8 else "")
        return "\n".join(
            [
                f"differ: max abs {self.max_abs:.3g} at t={self.worst_timestep:g}, column {self.worst_column}; "
                f"mean abs {self.mean_abs:.3g}",
                f"  {len(self.rows)} timesteps differ by more than {self.tol:g}: {rows}",
                f"  differing columns: {col_text}",
                *[f"  likely cause: {c}" for c in (self.causes or ["unknown (no single known cause explains it)"])],
            ]
        )


def _as_callable(impl, dim: int, name: str):
    if callable(impl) and not isinstance(impl, (str, Convention)):
        return impl
    if not isinstance(impl, Convention) and not (isinstance(impl, str) and impl in PRESETS):
        raise ValueError(
            f"{name} must be a callable t -> [N, dim], a preset name {sorted(PRESETS)} or a Convention, got {impl!r}"
        )
    conv = resolve_convention(impl)
    return lambda t: sinusoidal_embedding(t, dim, conv)


def _evaluate(fn, t: torch.Tensor) -> np.ndarray:
    return real_array(fn(t), "the output of an implementation").astype(np.float64)


def diff_report(impl_a, impl_b, timesteps, dim: int, *, tol: float = 1e-4) -> DiffReport:
    """Compare ``impl_a`` and ``impl_b`` at ``timesteps`` (both ``[N] -> [N, dim]``).

    Args:
        impl_a: a callable taking a float32 tensor of timesteps, or a preset name /
            [`Convention`][timestep_embed.Convention] (evaluated with
            [`sinusoidal_embedding`][timestep_embed.sinusoidal_embedding] at ``dim``).
        impl_b: the other implementation, in the same forms.
        timesteps: the grid, e.g. ``torch.arange(1000)``; values not exact in bfloat16 are
            needed to tell rounded timesteps apart.
        dim: embedding width.
        tol: entries that differ by more count as different.
    """
    t = torch.from_numpy(real_array(timesteps, "timesteps").astype(np.float32)).reshape(-1)
    if t.numel() == 0 or not torch.isfinite(t).all():
        raise ValueError(f"timesteps must hold at least one value, all finite in float32, got {timesteps!r}")
    check_dim(dim)
    tol = check_real(tol, "tol", minimum=0)
    fa, fb = _as_callable(impl_a, dim, "impl_a"), _as_callable(impl_b, dim, "impl_b")
    a, b = _evaluate(fa, t), _evaluate(fb, t)
    if a.shape != b.shape:
        raise ValueError(f"the implementations return different shapes: {a.shape} vs {b.shape}")
    diff = np.abs(a - b)
    row, col = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else (0, 0)
    bad_rows = diff.max(axis=1) > tol if diff.size else np.zeros(0, bool)
    report = DiffReport(
        float(diff.max(initial=0)),
        float(diff.mean()) if diff.size else 0.0,
        tol,
        float(t[row]) if len(t) else float("nan"),
        int(col),
        t.numpy()[bad_rows].astype(np.float64),
        np.flatnonzero(diff.max(axis=0, initial=0) > tol),
    )
    if not report.identical:
        report.causes = _causes(fa, fb, a, b, t, dim, tol)
    return report


def _causes(fa, fb, a, b, t, dim, tol) -> list[str]:
    causes = []
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        rounded = t.to(dtype).float()
        if np.abs(_evaluate(fa, rounded) - b).max() <= tol:
            causes.append(f"B rounds the timesteps to {name} before the embedding (A does not)")
        elif np.abs(a - _evaluate(fb, rounded)).max() <= tol:
            causes.append(f"A rounds the timesteps to {name} before the embedding (B does not)")
    if causes:
        return causes
    return embedding_causes(a, b, t, tol)


def embedding_causes(
    a: np.ndarray, b: np.ndarray, timesteps, tol: float = 1e-4, *, detect_tol: float = 1e-3
) -> list[str]:
    """Likely causes of the difference between two embedding matrices ``[N, dim]`` of the same ``timesteps``.

    Detects each matrix's convention (``timesteps`` needs 4 distinct values for that; ``detect_tol`` is the
    detector's tolerance: add the storage precision of matrices that were rounded, bfloat16's 0.0078) and names
    the fields that differ; else looks for a pure column permutation (any number of timesteps).
    """
    a, b = real_array(a, "a").astype(np.float64), real_array(b, "b").astype(np.float64)
    t = real_array(timesteps, "timesteps").astype(np.float64).reshape(-1)
    if a.ndim != 2 or a.shape != b.shape or a.shape[0] != t.shape[0]:
        raise ValueError(
            f"a and b must be [N, dim] of the same shape, N = {t.shape[0]} timesteps; got {a.shape}, {b.shape}"
        )
    dim = a.shape[-1]
    causes: list[str] = []
    da: Detection | None = None
    db: Detection | None = None
    if len(np.unique(t)) >= MIN_TIMESTEPS:
        da, db = detect_convention(a, t, tol=detect_tol), detect_convention(b, t, tol=detect_tol)
        if da.matched and db.matched and da.convention is not None and db.convention is not None:
            for name, text in _FIELD_CAUSES.items():
                va, vb = getattr(da.convention, name), getattr(db.convention, name)
                if va != vb:
                    causes.append(f"{text}: A has {name}={va!r}, B has {name}={vb!r}")
            ga, gb = da.convention.gain, db.convention.gain  # measured: equal within their estimates
            if abs(ga - gb) > 1e-3 * max(abs(ga), abs(gb)):
                causes.append(f"a different output gain (x-transformers' dim ** -0.5): A has gain={ga:.6g}, B {gb:.6g}")
            if da.rounding != db.rounding:
                causes.append(f"timesteps rounded before the embedding: A {da.rounding}, B {db.rounding}")
            return causes
    orders = [Convention(layout, first) for layout in ("concat", "interleaved") for first in ("sin", "cos")]
    for src in orders:  # a pure column permutation, whatever the frequencies
        for dst in orders:
            if src != dst and dim >= 2 and np.abs(a[:, layout_permutation(src, dst, dim)] - b).max() <= tol:
                return [
                    f"the same values in another column order: A is {src.layout}/{src.first} first, "
                    f"B is {dst.layout}/{dst.first} first"
                ]
    if da is None or db is None:
        return [f"not a column permutation; {MIN_TIMESTEPS} distinct timesteps are needed to name the conventions"]
    which = " and ".join(x for x, d in (("A", da), ("B", db)) if not d.matched)
    return [f"{which} matches no known sinusoidal convention ({(da if not da.matched else db).notes[0]})"]
