"""Input checks for the sinusoidal core: clear errors that name the argument, value and what is
accepted, and the warning for timesteps that arrive already rounded to float16/bfloat16."""

from __future__ import annotations

import math
import numbers
import warnings
from typing import NamedTuple

import numpy as np
import torch

__all__ = [
    "checked_timesteps",
    "check_dim",
    "check_dtype",
    "LowPrecisionTimestepWarning",
    "ValueRange",
    "value_range_of",
]

# Largest integer below which every integer is exact: 2 ** (mantissa bits + 1).
_EXACT_INTEGER_LIMIT = {torch.float16: 2048, torch.bfloat16: 256}


class LowPrecisionTimestepWarning(UserWarning):
    """Timesteps arrived in float16/bfloat16 and were probably rounded before the embedding."""


def check_dim(dim, freq_shift: float = 0.0) -> None:
    """``dim`` must be an int >= 1 and the grid denominator ``dim // 2 - freq_shift`` non-zero."""
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"dim must be an int >= 1, got {dim!r} ({type(dim).__name__})")
    if dim < 1:
        raise ValueError(f"dim must be an int >= 1, got {dim}")
    half = dim // 2
    if half >= 1 and half - freq_shift <= 0:
        raise ValueError(
            f"dim={dim} with freq_shift={freq_shift} gives the frequency exponent -k / (h - freq_shift) "
            f"a denominator h - freq_shift = {half - freq_shift} <= 0 (h = dim // 2 = {half}); diffusers "
            "silently returns NaN here. Use a larger dim or freq_shift=0."
        )


def check_dtype(dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype (e.g. torch.float32), got {dtype!r}")


# Up to this many CPU timesteps, one ``tolist()`` and Python checks beat tensor reductions.
SMALL_BATCH = 64


class ValueRange(NamedTuple):
    """What the fast paths need to know about a batch of timesteps, found during validation.

    ``low``/``high``: min and max (NaN when some value is NaN or inf). ``integral``: every value
    is a whole number (True for integer dtypes; None when not checked: large floating batches).
    """

    low: float
    high: float
    integral: bool | None


def checked_timesteps(timesteps, device=None) -> tuple[torch.Tensor, ValueRange | None]:
    """Timesteps as a real, finite torch tensor (any shape), on ``device`` or where they are,
    and the batch's :class:`ValueRange` (None when empty).

    Accepts Python numbers, (nested) lists, numpy arrays and tensors of integer or floating
    dtype. Rejects bool, complex and strings with a TypeError, NaN/inf with a ValueError, and
    warns (:class:`LowPrecisionTimestepWarning`) about float16/bfloat16 timesteps that look
    rounded. Floating timesteps get their range from the finiteness check itself (one ``aminmax``, whose
    min and max are NaN or inf exactly when some element is); integer ones get it here too.
    """
    if isinstance(timesteps, torch.Tensor):
        t = timesteps if device is None else timesteps.to(device)
    else:
        t = _from_python_or_numpy(timesteps, device)
    dtype = t.dtype
    if dtype == torch.bool or dtype.is_complex:
        raise TypeError(f"timesteps must be an integer or floating tensor, got dtype {dtype}")
    value_range = value_range_of(t)
    if dtype.is_floating_point:
        if value_range is not None and not (math.isfinite(value_range.low) and math.isfinite(value_range.high)):
            bad = t[~torch.isfinite(t)].flatten()[:3].tolist()
            raise ValueError(f"timesteps must be finite, got non-finite values such as {bad}")
        if dtype in _EXACT_INTEGER_LIMIT:
            _warn_if_rounded(t, value_range)
    return t, value_range


def value_range_of(t: torch.Tensor) -> ValueRange | None:
    """The :class:`ValueRange` of ``t`` (None when empty): a ``tolist()`` for small CPU batches,
    else one ``aminmax``."""
    n = t.numel()
    if n == 0:
        return None
    floating = t.dtype.is_floating_point
    if n <= SMALL_BATCH and t.is_cpu:
        values = t.tolist() if t.dim() == 1 else t.reshape(-1).tolist()
        if not floating:
            return ValueRange(min(values), max(values), True)
        # A finite sum proves every value finite (NaN and inf propagate); only an overflowing
        # or non-finite sum needs the per-value test.
        if not math.isfinite(sum(values)) and not all(map(math.isfinite, values)):
            return ValueRange(math.nan, math.nan, False)
        return ValueRange(min(values), max(values), all(map(float.is_integer, values)))
    low, high = torch.aminmax(t if t.dim() == 1 else t.reshape(-1))  # NaN propagates to both
    low, high = low.item(), high.item()
    if not floating:
        return ValueRange(low, high, True)
    # A fractional min or max settles "not all whole numbers" for free; else it stays unchecked.
    maybe_integral = math.isfinite(low) and math.isfinite(high) and low.is_integer() and high.is_integer()
    return ValueRange(low, high, None if maybe_integral else False)


def _from_python_or_numpy(timesteps, device) -> torch.Tensor:
    if isinstance(timesteps, (str, bytes)):
        raise TypeError(f"timesteps must be numbers (int or float), got the string {timesteps!r}")
    if isinstance(timesteps, (bool, np.bool_)):
        raise TypeError(f"timesteps must be int or float, got the bool {timesteps!r}")
    array = np.asarray(timesteps)
    if array.dtype.kind not in "iuf":
        raise TypeError(
            f"timesteps must be int or float numbers, got {timesteps!r} "
            f"(numpy dtype {array.dtype}); bool, complex and strings are not timesteps"
        )
    if array.dtype.kind == "u":  # torch has no uint32/uint64 arithmetic on every device
        array = array.astype(np.int64)
    t = torch.tensor(array)  # a copy: works for 0-d, read-only and non-contiguous arrays
    return t if device is None else t.to(device)


def _warn_if_rounded(t: torch.Tensor, value_range: ValueRange | None) -> None:
    """Half-precision timesteps: warn when they hold values their dtype can't have stored exactly.

    Once a timestep is float16/bfloat16 its original value is gone (bfloat16 stores 999 as 1000,
    float16 stores 998.4 as 998.5), so the test is on what such rounding leaves behind: integers
    beyond the range where the dtype holds every integer, or any fractional value at all.
    """
    if value_range is None:
        return
    limit = _EXACT_INTEGER_LIMIT[t.dtype]
    largest = max(abs(value_range.low), abs(value_range.high))
    fractional = bool((t != torch.round(t)).any())
    if largest > limit or fractional:
        spacing = float(torch.finfo(t.dtype).eps) * 2 ** np.floor(np.log2(max(largest, 1e-30)))
        warnings.warn(
            f"timesteps arrived as {t.dtype} with values up to {largest:g}; {t.dtype} spaces numbers "
            f"{spacing:g} apart there (and holds every integer only up to {limit}), so they were "
            "probably rounded before reaching the embedding (bfloat16 turns 999 into 1000, float16 "
            "turns 998.4 into 998.5). Keep timesteps in int64 or float32 under autocast / .half().",
            LowPrecisionTimestepWarning,
            stacklevel=4,
        )
