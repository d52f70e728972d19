"""Frequency coverage: which columns of the sinusoid barely move, or alias, over the range of values fed.

A sinusoid built for integer indices 0..999 (max_period 10000) fed t in [0, 1] raw leaves almost
every column constant; [`frequency_coverage`][timestep_embed.analysis.frequency_coverage] says so and recommends a
scale.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ..checks import check_bool, check_real
from ..conventions import Convention, resolve_convention
from ..sinusoidal import frequencies_np
from .properties import positions_array

__all__ = ["CoverageWarning", "Coverage", "frequency_coverage"]


class CoverageWarning(UserWarning):
    """The fed timestep range leaves most frequencies nearly constant, or aliases some."""


# ---------------------------------------------------------------------------------- coverage
@dataclass(frozen=True)
class Coverage:
    """How the frequencies cover a range of fed values ``t_range`` sampled every ``step``.

    Per frequency k ``[h]``: ``cycles_over_range = s w_k (t_max - t_min) / 2 pi``; ``slow`` where that
    is below ``fraction`` (the column is nearly constant over the range); ``cycles_per_step = s w_k
    step / 2 pi`` and ``aliased`` where it exceeds 1/2 (Nyquist: neighbouring steps are more than half
    a cycle apart). ``recommended_scale = 1 / step`` (one unit per step, the regime of integer
    indices, where the fastest frequency w_0 = 1 turns one radian per step); ``max_scale`` is the
    largest scale that aliases nothing. Both are total scales, to replace the convention's scale.
    """

    t_range: tuple[float, float]
    step: float
    scale: float
    frequencies: np.ndarray
    cycles_over_range: np.ndarray
    cycles_per_step: np.ndarray
    slow: np.ndarray
    aliased: np.ndarray
    recommended_scale: float
    max_scale: float
    messages: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.messages


def frequency_coverage(
    t_range=(0.0, 1.0),
    dim: int = 128,
    convention: str | Convention = "adm",
    *,
    step: float | None = None,
    fraction: float = 0.25,
    max_slow_share: float = 0.5,
    warn: bool = True,
) -> Coverage:
    """Which frequencies barely move (< ``fraction`` of a cycle) or alias over ``t_range``.

    ``step``: spacing of the fed values (default: 1000 steps across the range, DDPM's T).
    Warns ([`CoverageWarning`][timestep_embed.analysis.CoverageWarning]) when more than ``max_slow_share`` of the
    frequencies are slow or any aliases, e.g. for t in [0, 1] fed raw with max_period 10000 (``scale=1000`` fixes it).
    """
    ends = positions_array(t_range, "t_range").reshape(-1)
    if ends.size != 2 or not ends[1] > ends[0]:
        raise ValueError(f"t_range must be (t_min, t_max) with t_max > t_min, got {t_range!r}")
    t_min, t_max = float(ends[0]), float(ends[1])
    step = (t_max - t_min) / 1000 if step is None else check_real(step, "step", positive=True)
    fraction = check_real(fraction, "fraction", positive=True)
    if not 0 <= check_real(max_slow_share, "max_slow_share") <= 1:
        raise ValueError(f"max_slow_share must be in [0, 1] (a share of the frequencies), got {max_slow_share!r}")
    warn = check_bool(warn, "warn")
    conv = resolve_convention(convention)
    freqs = frequencies_np(dim, conv.freq_shift, conv.max_period)
    angular = abs(conv.scale) * freqs
    over_range = angular * (t_max - t_min) / (2 * math.pi)
    per_step = angular * step / (2 * math.pi)
    slow, aliased = over_range < fraction, per_step > 0.5
    recommended, max_scale = 1.0 / step, math.pi / (float(freqs.max()) * step)
    messages = []
    if slow.mean() > max_slow_share:
        messages.append(
            f"{slow.sum()} of {slow.size} frequencies complete less than {fraction:g} of a cycle over "
            f"t in [{t_min:g}, {t_max:g}] (the fastest {over_range.max():.3g} cycles) with scale "
            f"{conv.scale:g}: those columns are nearly constant. "
            + _slow_advice(conv, recommended, step, t_max - t_min, fraction)
        )
    if aliased.any():
        messages.append(
            f"{aliased.sum()} of {aliased.size} frequencies turn more than half a cycle per step of "
            f"{step:g} (aliasing: neighbouring steps look alike); keep the scale <= {max_scale:g}, "
            f"e.g. {min(recommended, max_scale):g}."
        )
    if warn:
        for message in messages:
            warnings.warn(message, CoverageWarning, stacklevel=2)
    per_frequency = (freqs, over_range, per_step, slow, aliased)
    return Coverage((t_min, t_max), step, float(conv.scale), *per_frequency, recommended, max_scale, tuple(messages))


def _slow_advice(conv: Convention, recommended: float, step: float, span: float, fraction: float) -> str:
    if abs(conv.scale) < 0.5 * recommended:
        return f"Scale t by ~{recommended:g} (one unit per step of {step:g})."
    # The slowest frequency is ~1 / max_period; it completes `fraction` of a cycle when
    # max_period <= scale * span / (2 pi fraction).
    return (
        f"The scale already gives ~one unit per step; a smaller max_period "
        f"(<= {abs(conv.scale) * span / (2 * math.pi * fraction):.3g}) would cover more of them."
    )
