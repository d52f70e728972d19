"""The ``precise=True`` compute paths (private): float64 phases, error <= ~1e-7 for |t| <= 1e6.

The float32 path's error is its phase: ``float32(t) * float32(w_k)`` is off by up to half an
ulp of ``t * w_k`` (6e-5 at t = 1000, 6e-2 at t = 1e6). Here the phase ``x = scale * t * w_k``
is formed in float64 and then:

* small outputs (few calls matter most): one float64 ``sin`` over ``[N, dim]``, the cos
  columns as ``sin(x + pi/2)`` (a column-wise phase offset), so the layout costs nothing;
* float32 outputs otherwise: split ``x`` into float32 ``hi`` plus its rounding error ``lo`` and
  correct a float32 sin/cos to first order, ``sin(hi + lo) = sin(hi) + cos(hi) * lo``. The
  dropped ``lo**2 / 2`` is below 3e-8 while |x| <= 4096 (|lo| <= 2**-12); beyond that ``x`` is
  first reduced modulo 2*pi in float64 (|lo| <= 2**-22). float32 transcendental speed,
  float64 phase accuracy.

Errors (max abs against the float64 reference): ~3e-8 (float64 sin) and ~7e-8 (corrected).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from ._kernels import Plan

# Up to this many output values, one float64 sin beats the corrected float32 path (fewer calls).
SMALL_OUTPUT = 1 << 13
# Row chunks of about this many phases keep the corrected path's temporaries (~32 bytes a
# phase) inside a 1 MiB L2 cache.
CHUNK_PHASES = 1 << 16
# Largest |phase| for which the unreduced first-order correction stays below 3e-8.
UNREDUCED_MAX_PHASE = 4096.0
_TWO_PI = 2.0 * math.pi


def column_phases(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """Per output column: frequency (times scale) and phase offset, so that column j holds
    ``sin(t * freq_j + offset_j)``; cos columns get offset pi/2, a padding column freq 0."""
    w = plan.freqs64 * plan.scale
    first, second = (np.full(plan.half, np.pi / 2), np.zeros(plan.half))
    if not plan.cos_first:
        first, second = second, first
    if plan.interleaved:
        freqs, offsets = np.stack([w, w], 1).reshape(-1), np.stack([first, second], 1).reshape(-1)
    else:
        freqs, offsets = np.concatenate([w, w]), np.concatenate([first, second])
    if plan.pad:
        freqs, offsets = np.append(freqs, 0.0), np.append(offsets, 0.0)
    return freqs, offsets


def embed_precise(t: torch.Tensor, plan: Plan, max_abs_t: float) -> torch.Tensor:
    """Precise embedding of 1-D ``t`` [N] into [N, dim] of ``plan.dtype``."""
    n = t.shape[0]
    if n * plan.dim <= SMALL_OUTPUT or plan.dtype == torch.float64:
        emb = float64_embedding(t, plan)
        return emb if plan.dtype == torch.float64 else emb.to(plan.dtype)
    out = torch.empty(n, plan.dim, dtype=torch.float32, device=t.device)
    reduce = max_abs_t * abs(plan.scale) * plan.max_freq > UNREDUCED_MAX_PHASE
    rows = max(1, CHUNK_PHASES // max(plan.half, 1))
    for start in range(0, n, rows):
        _corrected_float32_into(out[start : start + rows], plan.phases(t[start : start + rows]), plan, reduce)
    return out if plan.dtype == torch.float32 else out.to(plan.dtype)


def float64_embedding(t: torch.Tensor, plan: Plan) -> torch.Tensor:
    """[N] -> float64 [N, dim]: one ``sin`` of ``t * freq_j + offset_j`` (see column_phases)."""
    freqs, offsets = plan.column_rows(t.device)
    return torch.addcmul(offsets, t.unsqueeze(1), freqs).sin_()  # float64 by promotion, t exact


def _corrected_float32_into(out: torch.Tensor, phases: torch.Tensor, plan: Plan, reduce: bool) -> None:
    """sin/cos of float64 ``phases`` [N, h] (overwritten) into float32 ``out`` [N, dim]."""
    if reduce:  # to [-pi, pi], so that float32 holds the phase to 2**-22
        turns = torch.mul(phases, 1.0 / _TWO_PI).round_()
        phases.sub_(turns, alpha=_TWO_PI)
    hi = phases.float()
    lo = phases.sub_(hi).float()  # the float32 rounding error of hi
    sin_hi, cos_hi = torch.sin(hi), torch.cos(hi)
    plan.layout_into(out, torch.addcmul(sin_hi, cos_hi, lo), torch.addcmul(cos_hi, sin_hi, lo, value=-1))
