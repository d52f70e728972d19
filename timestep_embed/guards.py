"""The guards of the sinusoidal core: clear errors that name the argument, the value and what is accepted, and the
warning for timesteps that arrive already rounded to float16/bfloat16.

[`check_options`][timestep_embed.guards.check_options] guards what the options alone can break (width, frequencies,
gain) and runs in every mode; [`check_timesteps`][timestep_embed.guards.check_timesteps] reads the timesteps' values
where that costs no host sync ([`reads_values`][timestep_embed.modes.reads_values]): eagerly, values on the host
(Python numbers, lists, numpy arrays, CPU tensors). A tensor on an accelerator is embedded as diffusers embeds it,
unread (a read waits for the device); ``set_value_checks("all")`` checks those too, at one host read a call.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch

from .checks import check_dense, check_device, check_float_dtype, check_int, real_array
from .conventions import Convention

__all__ = [
    "TimestepsLike", "LowPrecisionTimestepWarning", "float_max", "check_dim", "check_options", "options_bound",
    "as_tensor", "value_range", "scales_in_input_dtype", "check_timesteps", "warn_half_on_device",
]  # fmt: skip

# What every function and module of the package accepts as timesteps: a tensor of any shape, a numpy
# array, a Python number or a (nested) list of numbers; integer or floating.
TimestepsLike = torch.Tensor | np.ndarray | float | int | Sequence

# Largest integer up to which every integer is exact: 2 ** (mantissa bits + 1).
_EXACT_INTEGER_LIMIT = {torch.float16: 2048, torch.bfloat16: 256}
_UNSIGNED = tuple(getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name))
_FLOAT_MAX = {
    dtype: float(torch.finfo(dtype).max) for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
}
_SMALL_BATCH = 64  # up to here one tolist() and Python checks beat tensor reductions


def float_max(dtype: torch.dtype) -> float:
    """The largest finite value of a floating dtype."""
    return _FLOAT_MAX.get(dtype) or float(torch.finfo(dtype).max)


class LowPrecisionTimestepWarning(UserWarning):
    """Timesteps arrived in float16/bfloat16 and were probably rounded before the embedding."""


# ------------------------------------------------------------------------------ the options
def check_dim(dim, freq_shift: float = 0.0) -> None:
    """``dim`` must be an int >= 1 and the exponent's denominator ``dim // 2 - freq_shift`` not 0 (0 / 0 at k = 0:
    NaN). Below 0 the frequencies grow with k, as diffusers computes them; `check_options` refuses them where they
    overflow."""
    check_int(dim, "dim")
    half = int(dim) // 2
    if half >= 1 and half - freq_shift == 0:
        raise ValueError(
            f"dim={dim} with freq_shift={freq_shift} gives the frequency exponent -k / (h - freq_shift) "
            f"a denominator h - freq_shift = 0 (h = dim // 2 = {half}); diffusers silently returns NaN here "
            "(0 / 0 at k = 0). Use a larger dim or freq_shift=0."
        )


def check_options(dim, conv: Convention, dtype: torch.dtype = torch.float32, precise: bool = False) -> float:
    """The guards that need no timestep: ``dim``, ``dtype``, frequencies and gain that stay finite in
    the compute dtype (float32, float64 when ``precise``) and the output ``dtype``.

    Returns the largest frequency ``w_max = max_k max_period ** (-k / (h - freq_shift))`` (>= 1; above
    1 only for ``max_period < 1``), which bounds the phase ``|t| * w_max * |scale|``.
    """
    check_dim(dim, conv.freq_shift)
    check_float_dtype(dtype)
    compute = torch.float64 if precise else torch.float32
    half = dim // 2
    log_w_max = max(0.0, -math.log(conv.max_period) * (half - 1) / (half - conv.freq_shift)) if half > 1 else 0.0
    if log_w_max > math.log(float_max(compute)):
        raise ValueError(
            f"max_period={conv.max_period:g} with freq_shift={conv.freq_shift:g} and dim={dim} gives frequencies "
            f"up to max_period ** (-(h - 1) / (h - freq_shift)) = e^{log_w_max:.4g}, beyond {compute} (max "
            f"{float_max(compute):.3g}): the embedding would be NaN. Use a max_period closer to 1 or above it."
        )
    limit = min(float_max(compute), float_max(dtype))
    if abs(conv.gain) > limit:
        which = dtype if float_max(dtype) < float_max(compute) else compute
        raise ValueError(f"gain={conv.gain:g} overflows {which} (max {limit:.5g}): the embedding would hold inf")
    return math.exp(log_w_max)


_remembered_options = lru_cache(maxsize=256, typed=True)(check_options)


def options_bound(dim, conv: Convention, dtype: torch.dtype = torch.float32, precise: bool = False) -> float:
    """[`check_options`][timestep_embed.guards.check_options], remembered per set of arguments (the core checks its
    options on every call; this makes a repeated call ~0.7 us instead of ~5). Unhashable arguments are checked
    afresh."""
    try:
        return _remembered_options(dim, conv, dtype, precise)
    except TypeError:  # an unhashable argument (a list): check_options names it
        return check_options(dim, conv, dtype, precise)


# ------------------------------------------------------------------------------ the values
def as_tensor(timesteps: TimestepsLike, device=None, name: str = "timesteps") -> torch.Tensor:
    """A real dense tensor of ``timesteps`` on ``device``; Python and numpy values become int64/float64.
    TypeError naming ``name`` for bool, complex, strings, sparse tensors and other objects."""
    device = check_device(device)
    if isinstance(timesteps, torch.Tensor):
        t = check_dense(timesteps, name) if device is None else check_dense(timesteps, name).to(device)
    elif type(timesteps) is float or type(timesteps) is int and -(2**63) <= timesteps < 2**63:
        # a Python number as numpy would hold it (int64, float64), without numpy, which torch.compile cannot trace
        t = torch.tensor(timesteps, dtype=torch.float64 if type(timesteps) is float else torch.int64, device=device)
    else:
        array = real_array(timesteps, name)
        if array.dtype.kind == "u" and (array.size == 0 or array.max() < 2**63):  # torch lacks most unsigned ops
            array = array.astype(np.int64)
        elif array.dtype.kind == "u" and not hasattr(torch, "uint64"):  # torch < 2.3: float64, which rounds twice
            array = array.astype(np.float64)
        t = torch.tensor(array, device=device)  # a copy: 0-d, read-only and strided arrays all work
    if t.dtype == torch.bool or t.dtype.is_complex:
        raise TypeError(f"{name} must be an integer or floating tensor, got dtype {t.dtype}")
    return t


def value_range(flat: torch.Tensor) -> tuple[float, float, bool | None]:
    """(min, max, whole) of a non-empty 1-D tensor: NaN min and max when any value is NaN or inf. ``whole``: for a
    float16/bfloat16 tensor read on the host (a small CPU batch) or on an accelerator, whether every value is an
    integer (the rounding warning's test), read together with the min and max; else None."""
    half = flat.dtype in _EXACT_INTEGER_LIMIT
    if flat.numel() <= _SMALL_BATCH and flat.is_cpu:
        values = flat.tolist()  # one read for every check
        # A finite sum proves every value finite; only an overflowing or non-finite sum needs a closer look.
        if flat.is_floating_point() and not math.isfinite(sum(values)) and not all(map(math.isfinite, values)):
            return math.nan, math.nan, None
        return min(values), max(values), all(v.is_integer() for v in values) if half else None
    if flat.dtype in _UNSIGNED:
        flat = flat.double()  # aminmax has no kernels for these
    low, high = torch.aminmax(flat)  # NaN propagates to both
    if flat.is_cpu:
        return low.item(), high.item(), None
    # On an accelerator each read waits for the device: one read, not two or three.
    if not half:
        return (*torch.stack((low, high)).tolist(), None)
    low_, high_, whole = torch.stack((low, high, (flat == flat.round()).all().to(flat.dtype))).float().tolist()
    return low_, high_, whole == 1


def scales_in_input_dtype(asked: bool, t: torch.Tensor, convention: Convention) -> bool:
    """Whether ``scale * t`` is formed in ``t``'s dtype: ``scale_in_input_dtype`` was asked, ``t`` is floating and
    the scale is not 1 (an integer ``t`` or a scale of 1 leaves nothing to round). The core and its guard decide
    by this one rule."""
    return asked and t.is_floating_point() and convention.scale != 1


def check_timesteps(
    t: torch.Tensor,
    convention: Convention,
    precise: bool = False,
    *,
    max_frequency: float = 1.0,
    scale_in_input_dtype: bool = False,
) -> tuple[float, float] | None:
    """``(low, high)``, the min and max of the real tensor ``t`` (None when empty), after the eager guards.

    Raises ValueError for NaN/inf, and for finite values whose phase ``t * w_k * scale`` overflows the
    compute dtype (float32, float64 when ``precise``; ``max_frequency`` from
    [`check_options`][timestep_embed.guards.check_options]) or, with ``scale_in_input_dtype``, whose ``scale * t``
    overflows ``t``'s own dtype (float16 ends at 65504); warns
    ([`LowPrecisionTimestepWarning`][timestep_embed.LowPrecisionTimestepWarning]) about float16/bfloat16 timesteps that
    look rounded, unless ``scale_in_input_dtype`` asks for the arithmetic of that dtype (Flux's own rounding).
    """
    if t.numel() == 0:
        return None
    low, high, whole = value_range(t if t.dim() == 1 else t.reshape(-1))
    if not (math.isfinite(low) and math.isfinite(high)):
        bad = t.detach()[~torch.isfinite(t.detach())].flatten()[:3].tolist()
        raise ValueError(f"timesteps must be finite, got non-finite values such as {bad}")
    largest, scale = max(abs(low), abs(high)), abs(convention.scale)
    in_input_dtype = scales_in_input_dtype(scale_in_input_dtype, t, convention)
    if in_input_dtype:
        if largest * scale > float_max(t.dtype):
            raise ValueError(
                f"timesteps up to {largest:g} with scale {scale:g} overflow {t.dtype} (max {float_max(t.dtype):.5g}), "
                "the dtype scale_in_input_dtype=True forms scale * t in; the embedding would be NaN"
            )
        phase = largest * scale * max_frequency
    else:
        phase = largest * max_frequency * max(1.0, scale)  # t * w_k first, then times scale
    limit = float_max(torch.float64 if precise else torch.float32)
    if phase > limit:
        frequencies = f" and frequencies up to {max_frequency:g}" if max_frequency > 1 else ""
        raise ValueError(
            f"timesteps up to {largest:g} with scale {scale:g}{frequencies} overflow the "
            f"{'float64' if precise else 'float32'} phase (max {limit:.3g}); the embedding would be NaN"
        )
    if t.dtype in _EXACT_INTEGER_LIMIT and not in_input_dtype:
        _warn_if_rounded(t, largest, whole)
    return low, high


def warn_half_on_device(t: torch.Tensor) -> None:
    """The rounded-timestep warning for a float16/bfloat16 tensor whose values are not read (on an
    accelerator): the dtype alone says the timesteps were probably rounded before the embedding."""
    if t.dtype in _EXACT_INTEGER_LIMIT:
        warnings.warn(_ROUNDED[t.dtype, "device"], LowPrecisionTimestepWarning, stacklevel=4)


def _warn_if_rounded(t: torch.Tensor, largest: float, whole: bool | None) -> None:
    """Half-precision timesteps: warn when they hold values that dtype cannot have stored exactly.

    Once a timestep is float16/bfloat16 its original value is gone (bfloat16 stores 999 as 1000,
    float16 stores 998.4 as 998.5), so the test is on what rounding leaves behind: integers beyond
    the range where the dtype holds every integer, or any fractional value at all. The message is
    the same for every call with that dtype, so Python's warning filters show it once per call site
    (not once per batch of new values) and the registry behind them stays small.
    """
    if largest > _EXACT_INTEGER_LIMIT[t.dtype] or not (torch.equal(t, t.round()) if whole is None else whole):
        warnings.warn(_ROUNDED[t.dtype, "host"], LowPrecisionTimestepWarning, stacklevel=4)


_WHAT = {
    "host": "with fractional values or integers above {limit}",
    "device": "on an accelerator (where their values are not read)",
}
_ROUNDED = {
    (dtype, where): f"timesteps arrived as {dtype} {what.format(limit=limit)}: {dtype} spaces numbers "
    f"{torch.finfo(dtype).eps * 512:g} apart near 1000 and holds every integer only up to {limit}, so they were "
    "probably rounded before reaching the embedding (bfloat16 turns 999 into 1000, float16 turns 998.4 into 998.5). "
    "Keep timesteps in int64 or float32 under autocast / .half()."
    for dtype, limit in _EXACT_INTEGER_LIMIT.items()
    for where, what in _WHAT.items()
}
