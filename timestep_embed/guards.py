"""The guards of the sinusoidal core: clear errors that name the argument, the value and what is
accepted, and the warning for timesteps that arrive already rounded to float16/bfloat16.

They read the timesteps' values, so they run eagerly only; :func:`graph_mode` says when not.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence

import numpy as np
import torch

from .conventions import Convention

__all__ = ["TimestepsLike", "LowPrecisionTimestepWarning", "check_dim", "graph_mode", "as_tensor", "check_timesteps"]

# What every function and module of the package accepts as timesteps: a tensor of any shape, a numpy
# array, a Python number or a (nested) list of numbers; integer or floating.
TimestepsLike = torch.Tensor | np.ndarray | float | int | Sequence

_FLOAT_MAX = {False: float(torch.finfo(torch.float32).max), True: float(torch.finfo(torch.float64).max)}
# Largest integer up to which every integer is exact: 2 ** (mantissa bits + 1).
_EXACT_INTEGER_LIMIT = {torch.float16: 2048, torch.bfloat16: 256}
_SMALL_BATCH = 64  # up to here one tolist() and Python checks beat tensor reductions


class LowPrecisionTimestepWarning(UserWarning):
    """Timesteps arrived in float16/bfloat16 and were probably rounded before the embedding."""


# --------------------------------------------------------------------------------------- guards
def check_dim(dim, freq_shift: float = 0.0) -> None:
    """``dim`` must be an int >= 1 and the exponent's denominator ``dim // 2 - freq_shift`` > 0."""
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"dim must be an int >= 1, got {dim!r} ({type(dim).__name__})")
    if dim < 1:
        raise ValueError(f"dim must be an int >= 1, got {dim}")
    half = int(dim) // 2
    if half >= 1 and half - freq_shift <= 0:
        raise ValueError(
            f"dim={dim} with freq_shift={freq_shift} gives the frequency exponent -k / (h - freq_shift) "
            f"a denominator h - freq_shift = {half - freq_shift} <= 0 (h = dim // 2 = {half}); diffusers "
            "silently returns NaN here. Use a larger dim or freq_shift=0."
        )


def graph_mode(t: torch.Tensor) -> bool:
    """True where the values of ``t`` cannot or must not be read: under ``torch.jit.trace``,
    ``torch.compile`` or ``torch.export``, for meta tensors and tensor subclasses (fake tensors)."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling() or t.is_meta or type(t) is not torch.Tensor


def as_tensor(timesteps: TimestepsLike, device=None) -> torch.Tensor:
    """A real tensor of ``timesteps`` on ``device``; Python and numpy values become int64/float64."""
    if isinstance(timesteps, torch.Tensor):
        t = timesteps if device is None else timesteps.to(device)
    else:
        if isinstance(timesteps, (str, bytes, bool, np.bool_)):
            kind = "a bool" if isinstance(timesteps, (bool, np.bool_)) else "a string"
            raise TypeError(f"timesteps must be int or float numbers, got {kind}: {timesteps!r}")
        array = np.asarray(timesteps)
        if array.dtype.kind not in "iuf":
            raise TypeError(
                f"timesteps must be int or float numbers, got {timesteps!r} (numpy dtype {array.dtype}); "
                "bool, complex and strings are not timesteps"
            )
        if array.dtype.kind == "u":  # torch lacks most uint32/uint64 ops; uint64 >= 2**63 must not wrap
            array = array.astype(np.int64 if array.size == 0 or array.max() < 2**63 else np.float64)
        t = torch.tensor(array, device=device)  # a copy: 0-d, read-only and strided arrays all work
    if t.dtype == torch.bool or t.dtype.is_complex:
        raise TypeError(f"timesteps must be an integer or floating tensor, got dtype {t.dtype}")
    return t


def _value_range(flat: torch.Tensor) -> tuple[float, float, list | None]:
    """(min, max, values) of a non-empty 1-D tensor: NaN min and max when any value is NaN or inf;
    ``values`` is the Python list of a small CPU batch (read once for every check), else None."""
    if flat.numel() <= _SMALL_BATCH and flat.is_cpu:
        values = flat.tolist()
        # A finite sum proves every value finite; only an overflowing or non-finite sum needs a closer look.
        if flat.is_floating_point() and not math.isfinite(sum(values)) and not all(map(math.isfinite, values)):
            return math.nan, math.nan, values
        return min(values), max(values), values
    if flat.dtype in (torch.uint16, torch.uint32, torch.uint64):
        flat = flat.double()  # aminmax has no kernels for these
    low, high = torch.aminmax(flat)  # NaN propagates to both
    return low.item(), high.item(), None


def check_timesteps(
    timesteps: TimestepsLike, convention: Convention, precise: bool = False, device=None
) -> tuple[torch.Tensor, tuple[float, float] | None]:
    """``(t, (low, high))``: timesteps as a real tensor of any shape on ``device`` (or where they
    are) and their min and max, after the eager guards.

    Raises TypeError for bool, complex and strings; ValueError for NaN/inf, and for finite values
    that overflow the compute dtype once cast or multiplied by ``scale`` (float64 1e300 is inf in
    float32); warns (:class:`LowPrecisionTimestepWarning`) about float16/bfloat16 timesteps that look
    rounded. ``(low, high)`` is None for an empty input.
    """
    t = as_tensor(timesteps, device)
    if t.numel() == 0:
        return t, None
    low, high, values = _value_range(t if t.dim() == 1 else t.reshape(-1))
    if not (math.isfinite(low) and math.isfinite(high)):
        bad = t.detach()[~torch.isfinite(t.detach())].flatten()[:3].tolist()
        raise ValueError(f"timesteps must be finite, got non-finite values such as {bad}")
    largest = max(abs(low), abs(high))
    limit = _FLOAT_MAX[precise]
    if largest > limit or largest * abs(convention.scale) > limit:
        raise ValueError(
            f"timesteps up to {largest:g} with scale {convention.scale:g} overflow the "
            f"{'float64' if precise else 'float32'} phase (max {limit:.3g}); the embedding would be NaN"
        )
    if t.dtype in _EXACT_INTEGER_LIMIT:
        _warn_if_rounded(t, largest, values)
    return t, (low, high)


def _warn_if_rounded(t: torch.Tensor, largest: float, values: list | None) -> None:
    """Half-precision timesteps: warn when they hold values that dtype cannot have stored exactly.

    Once a timestep is float16/bfloat16 its original value is gone (bfloat16 stores 999 as 1000,
    float16 stores 998.4 as 998.5), so the test is on what rounding leaves behind: integers beyond
    the range where the dtype holds every integer, or any fractional value at all.
    """
    limit = _EXACT_INTEGER_LIMIT[t.dtype]
    if values is not None:
        fractional = not all(v.is_integer() for v in values)
    else:
        fractional = largest <= limit and not torch.equal(t, torch.round(t))
    if largest > limit or fractional:
        spacing = torch.finfo(t.dtype).eps * 2 ** math.floor(math.log2(max(largest, 1e-30)))
        warnings.warn(
            f"timesteps arrived as {t.dtype} with values up to {largest:g}; {t.dtype} spaces numbers "
            f"{spacing:g} apart there (and holds every integer only up to {limit}), so they were "
            "probably rounded before reaching the embedding (bfloat16 turns 999 into 1000, float16 "
            "turns 998.4 into 998.5). Keep timesteps in int64 or float32 under autocast / .half().",
            LowPrecisionTimestepWarning,
            stacklevel=4,
        )
