"""How much two correct ports may differ at each stage: the float32 rounding of the phase at the sinusoid,
and what that difference can grow into later, measured on the reference's own rows.

The sinusoid at ``t`` may differ by a few float32 ulps of its phase ``t * w`` (the phase's own rounding, the
frequency's in another operation order, sin's): ``4 eps32 (1 + |t| max w)`` per row, plus a few ulps of the output
dtype (a sinusoid returned in bfloat16 rounds its values, not its phase: diffusers forms the phase in float32), plus
the inputs' own difference times the frequency. A later stage may differ by what the stage before it
differed, times the largest growth of a row-to-row difference between the two stages on the
reference's rows, times a margin of 10; with fewer than 2 distinct rows that growth is unknown and the
stage is not judged on top of its tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from .stage import Stage

__all__ = ["stage_allowance", "stage_values"]

_ULPS = 4  # the phase's rounding, the frequency's (one ulp or two in another float order), sin's own
_GROWTH = 10.0  # margin on the measured growth of a rounding difference from one stage to the next
_PAIRS = 2**22  # row differences (pairs x width) formed at once in `_growth`: 32 MB of float64


def stage_values(stage: Stage) -> torch.Tensor:
    """What is compared at a stage, in float64: the phase for a sinusoid input, else the value."""
    phase = stage.phase if stage.kind == "sinusoid input" and stage.phase is not None else stage.value
    return phase.detach().double().cpu()


def stage_allowance(key, a: Stage, ka: Mapping, kb: Mapping, seen: Mapping, base: float) -> float | torch.Tensor:
    """The largest difference at stage ``key`` (``(kind, label, n)``; ``a`` the reference's stage, ``ka`` /
    ``kb`` both sides' stages by key, ``seen`` the differences judged so far) that float32 rounding
    explains, on top of ``base`` (the tolerance): a float, or one value per row of a sinusoid (its
    rounding grows with the phase of that row)."""
    kind, label, n = key
    if kind in ("timestep", "sinusoid input"):
        return base
    if kind == "sinusoid":
        return _sinusoid(a, kb[key], ka.get(("sinusoid input", label, n)), kb.get(("sinusoid input", label, n)), base)
    before = [k for k in seen if k[0] == _BEFORE[kind] and (kind != "time embedding" or k[1:] == (label, n))]
    if not before:
        before = [k for k in seen if k[0] in ("time embedding", "sinusoid")][-1:]
    upstream = sum(seen[k].max_abs for k in before if math.isfinite(seen[k].max_abs))
    if upstream == 0:
        return base
    return base + _GROWTH * _growth(ka[before[-1]].value, a.value) * upstream


def _sinusoid(a: Stage, b: Stage, in_a: Stage | None, in_b: Stage | None, base: float):
    if in_a is None or in_b is None or in_a.phase is None or in_b.phase is None:
        return base
    pa, pb = in_a.phase.double().reshape(-1), in_b.phase.double().reshape(-1)
    rows = a.value.numel() // max(1, a.value.shape[-1]) if a.value.dim() else 1
    if pa.shape != pb.shape or pa.numel() != rows:
        return base
    frequency = max(in_a.frequency, in_b.frequency)
    eps32 = torch.finfo(torch.float32).eps
    out_eps = max(torch.finfo(d).eps if d.is_floating_point else eps32 for d in (a.value.dtype, b.value.dtype))
    largest = float(a.value.detach().abs().max()) if a.value.numel() else 1.0  # 1, or the gain
    moved = frequency * (pa - pb).abs().nan_to_num(0.0)  # the inputs' own (allowed) difference, carried on
    phase = eps32 * (1.0 + torch.maximum(pa.abs(), pb.abs()) * frequency)
    return base + _ULPS * (phase + out_eps * max(1.0, largest)) + moved


_BEFORE = {"time embedding": "sinusoid", "modulation": "time embedding", "output": "modulation"}


def _growth(before: torch.Tensor, after: torch.Tensor, block: int | None = None) -> float:
    """How much a difference between two rows of ``before`` grows into in ``after``: the largest ratio of
    row differences (max norm) over pairs of the reference's rows; inf with fewer than 2 distinct rows.
    The pairs are taken ``block`` rows at a time against the rows after them (default: about ``_PAIRS``
    values at once), so memory grows with the rows, not with their square."""
    if before.dim() == 0 or after.dim() == 0 or before.shape[0] != after.shape[0] or before.shape[0] < 2:
        return math.inf
    x = before.detach().double().reshape(before.shape[0], -1)
    y = after.detach().double().reshape(after.shape[0], -1)
    n = x.shape[0]
    rows = block or max(1, _PAIRS // (n * max(1, x.shape[1], y.shape[1])))
    largest = []
    for i in range(0, n, rows):
        dx = (x[i : i + rows, None] - x[None, i:]).abs().amax(-1)
        dy = (y[i : i + rows, None] - y[None, i:]).abs().amax(-1)
        moved = dx > 0
        if bool(moved.any()):
            largest.append((dy[moved] / dx[moved]).max())
    return float(torch.stack(largest).max()) if largest else math.inf
