"""Input checks for the sinusoidal core: clear errors that name the argument, value and what is
accepted, and the warning for timesteps that arrive already rounded to float16/bfloat16."""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import torch

__all__ = ["as_timestep_tensor", "check_dim", "check_dtype", "LowPrecisionTimestepWarning"]

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


_FAST_INT_DTYPES = (torch.int64, torch.int32)


def as_timestep_tensor(timesteps, device=None) -> torch.Tensor:
    """Timesteps as a real, finite torch tensor (any shape), on ``device`` or where they are.

    Accepts Python numbers, (nested) lists, numpy arrays and tensors of integer or floating
    dtype. Rejects bool, complex and strings with a TypeError, NaN/inf with a ValueError, and
    warns (:class:`LowPrecisionTimestepWarning`) about float16/bfloat16 timesteps that look
    rounded.
    """
    if isinstance(timesteps, torch.Tensor):
        t = timesteps if device is None else timesteps.to(device)
    else:
        t = _from_python_or_numpy(timesteps, device)
    dtype = t.dtype
    if dtype in _FAST_INT_DTYPES:  # the common case, nothing to check
        return t
    if dtype.is_floating_point:
        if not _all_finite(t):
            bad = t[~torch.isfinite(t)].flatten()[:3].tolist()
            raise ValueError(f"timesteps must be finite, got non-finite values such as {bad}")
        if dtype in _EXACT_INTEGER_LIMIT:
            _warn_if_rounded(t)
        return t
    if dtype == torch.bool or dtype.is_complex:
        raise TypeError(f"timesteps must be an integer or floating tensor, got dtype {dtype}")
    return t


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


def _all_finite(t: torch.Tensor) -> bool:
    # Cheapest exact test first: a finite sum proves every element finite (NaN and inf
    # propagate); only an overflowing or non-finite sum needs the elementwise check.
    if t.numel() <= 64 and t.device.type == "cpu":
        values = t.tolist() if t.dim() == 1 else t.reshape(-1).tolist()
        return all(map(math.isfinite, values))
    if math.isfinite(float(t.sum(dtype=torch.float64))):
        return True
    return bool(torch.isfinite(t).all())


def _warn_if_rounded(t: torch.Tensor) -> None:
    """Half-precision timesteps: warn when they hold values their dtype can't have stored exactly.

    Once a timestep is float16/bfloat16 its original value is gone (bfloat16 stores 999 as 1000,
    float16 stores 998.4 as 998.5), so the test is on what such rounding leaves behind: integers
    beyond the range where the dtype holds every integer, or any fractional value at all.
    """
    if t.numel() == 0:
        return
    limit = _EXACT_INTEGER_LIMIT[t.dtype]
    largest = float(t.abs().max())
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
