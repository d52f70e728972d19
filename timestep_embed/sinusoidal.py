"""The sinusoidal core: pure functions, no nn.Module.

With ``h = dim // 2`` and ``k = 0 .. h-1`` the frequencies are
``w_k = max_period ** (-k / (h - freq_shift))``; the embedding of ``t`` holds
``sin(scale * t * w_k)`` and ``cos(scale * t * w_k)``, arranged by the :class:`Convention`
(``[cos | sin]`` halves for the default ``"adm"``); an odd ``dim`` ends with a zero column.

Compute paths, all in :func:`sinusoidal_embedding`:

1. **float32**: exactly the operations of diffusers' ``get_timestep_embedding`` (float32
   frequencies ``exp(-ln(max_period) * arange(h) / (h - freq_shift))``, ``t[:, None].float() * w``,
   times ``scale``, ``sin``, ``cos``, one concatenation), so the numbers are bit-identical to
   diffusers wherever diffusers has the option. The frequencies are cached per device.
2. **precise** (``precise=True`` or ``dtype=torch.float64``): the same operations in float64,
   rounded once to ``dtype``. Max error ~6e-8 for |t| <= 1e6, where float32 loses ~5e-2 (the float32
   phase is off by up to half an ulp of ``t * w_k``).
3. **distinct values**: a batch sharing one timestep (every sampling step), or a large batch of few
   distinct values (integer steps, per-token timesteps ``[B, tokens]``), is embedded once per
   distinct value by path 1 or 2 and gathered. sin and cos are elementwise, so every row has the
   bits path 1 or 2 would give it.

Eager calls check their input first (:func:`check_timesteps`). Under ``torch.jit.trace``,
``torch.compile``, ``torch.export``, on meta and fake tensors, paths 1 and 2 run as they are, with
no data-dependent branch and no value check, exactly like diffusers' function (:func:`graph_mode`);
inputs that require grad are checked but always take path 1 or 2, so d/dt is diffusers' d/dt.
"""

from __future__ import annotations

import math
import numbers
import warnings
from functools import lru_cache

import numpy as np
import torch

from .conventions import Convention, convention_from_diffusers, resolve_convention

__all__ = [
    "LowPrecisionTimestepWarning",
    "frequencies",
    "frequencies_np",
    "sinusoidal_embedding",
    "sinusoidal_embedding_np",
    "get_timestep_embedding",
    "check_dim",
    "check_timesteps",
    "graph_mode",
]

_FLOAT_MAX = {False: float(torch.finfo(torch.float32).max), True: float(torch.finfo(torch.float64).max)}
# Largest integer up to which every integer is exact: 2 ** (mantissa bits + 1).
_EXACT_INTEGER_LIMIT = {torch.float16: 2048, torch.bfloat16: 256}
_SMALL_BATCH = 64  # up to here one tolist() and Python checks beat tensor reductions
_DISTINCT_MIN_VALUES = 1 << 13  # smaller outputs are cheaper to compute than to deduplicate
_DISTINCT_MIN_ROWS = 512  # below, a sort to find distinct values costs more than it saves


class LowPrecisionTimestepWarning(UserWarning):
    """Timesteps arrived in float16/bfloat16 and were probably rounded before the embedding."""


# --------------------------------------------------------------------------------------- guards
def check_dim(dim, freq_shift: float = 0.0) -> None:
    """``dim`` must be an int >= 1 and the exponent's denominator ``dim // 2 - freq_shift`` > 0."""
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


def graph_mode(t: torch.Tensor) -> bool:
    """True where the values of ``t`` cannot or must not be read: under ``torch.jit.trace``,
    ``torch.compile`` or ``torch.export``, for meta tensors and tensor subclasses (fake tensors)."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling() or t.is_meta or type(t) is not torch.Tensor


def _as_tensor(timesteps, device) -> torch.Tensor:
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


def check_timesteps(timesteps, convention: Convention, precise: bool = False, device=None):
    """``(t, (low, high))``: timesteps as a real tensor of any shape on ``device`` (or where they
    are) and their min and max, after the eager guards.

    Raises TypeError for bool, complex and strings; ValueError for NaN/inf, and for finite values
    that overflow the compute dtype once cast or multiplied by ``scale`` (float64 1e300 is inf in
    float32); warns (:class:`LowPrecisionTimestepWarning`) about float16/bfloat16 timesteps that look
    rounded. ``(low, high)`` is None for an empty input.
    """
    t = _as_tensor(timesteps, device)
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


# ---------------------------------------------------------------------------------- frequencies
def _frequencies(half: int, freq_shift: float, max_period: float, dtype: torch.dtype, device) -> torch.Tensor:
    """``w_k`` [half] with diffusers' operations, in float32 or float64."""
    exponent = -math.log(max_period) * torch.arange(0, half, dtype=dtype, device=device)
    return torch.exp(exponent / (half - freq_shift))


_cached_frequencies = lru_cache(maxsize=256)(_frequencies)


def frequencies(dim: int, freq_shift: float = 0.0, max_period: float = 10000.0, *, device=None, precise=False):
    """Frequencies ``w_k`` [dim // 2]: float32 as diffusers computes them, or float64 (``precise``)."""
    check_dim(dim, freq_shift)
    return _frequencies(dim // 2, freq_shift, max_period, torch.float64 if precise else torch.float32, device)


def frequencies_np(dim: int, freq_shift: float = 0.0, max_period: float = 10000.0) -> np.ndarray:
    """Float64 numpy reference frequencies ``w_k = max_period ** (-k / (h - freq_shift))`` [dim // 2]."""
    check_dim(dim, freq_shift)
    half = dim // 2
    return np.exp(-math.log(max_period) * np.arange(half, dtype=np.float64) / (half - freq_shift))


# -------------------------------------------------------------------------------- the embedding
def _direct(flat: torch.Tensor, dim: int, conv: Convention, precise: bool, eager: bool) -> torch.Tensor:
    """Paths 1 and 2: ``flat`` [N] -> [N, dim] in float32 (float64 when ``precise``).

    The phase is diffusers' ``t[:, None].float() * w[None, :]``; eagerly and without autograd it is
    formed by ``torch.outer``, the same products in one call. ``eager`` also caches the frequencies.
    """
    dtype = torch.float64 if precise else torch.float32
    freqs = (_cached_frequencies if eager else _frequencies)(
        dim // 2, conv.freq_shift, conv.max_period, dtype, flat.device
    )
    x = flat.double() if precise else flat.float()
    phase = torch.outer(x, freqs) if eager and not x.requires_grad else x[:, None] * freqs[None, :]
    if conv.scale != 1:  # diffusers multiplies by scale always; times 1 is exact either way
        phase = conv.scale * phase
    a, b = torch.sin(phase), torch.cos(phase)
    if conv.first == "cos":
        a, b = b, a
    emb = torch.cat((a, b), dim=-1) if conv.layout == "concat" else torch.stack((a, b), dim=-1).flatten(-2)
    return torch.nn.functional.pad(emb, (0, 1)) if dim % 2 else emb


def _distinct(flat: torch.Tensor, low: float, high: float) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(values, index)`` with ``flat == values[index]`` when few values repeat, else None."""
    n = flat.shape[0]
    if n < _DISTINCT_MIN_ROWS:
        return None
    if flat.is_floating_point():
        if len(set(flat[:256].tolist())) > 64:  # the first rows are mostly distinct: skip the sort
            return None
    elif (high - low + 1) * 2 > n:  # integers: the range alone bounds the distinct count
        return None
    values, index = torch.unique(flat, return_inverse=True)
    return (values, index) if 2 * values.shape[0] <= n else None


def _embed(t: torch.Tensor, value_range, dim: int, conv: Convention, precise: bool) -> torch.Tensor:
    """[...] -> [..., dim] in float32/float64 by paths 1-3 (path 3 only with a ``value_range``)."""
    flat = t if t.dim() == 1 else t.reshape(-1)
    n, eager = flat.shape[0], value_range is not None
    if not eager or t.requires_grad or n * dim < _DISTINCT_MIN_VALUES:
        emb = _direct(flat, dim, conv, precise, eager)
    elif value_range[0] == value_range[1]:  # one timestep for the whole batch
        emb = _direct(flat[:1], dim, conv, precise, eager).expand(n, dim).clone()
    else:
        distinct = _distinct(flat, *value_range)
        if distinct is None:
            emb = _direct(flat, dim, conv, precise, eager)
        else:
            emb = _direct(distinct[0], dim, conv, precise, eager).index_select(0, distinct[1])
    return emb if t.dim() == 1 else emb.reshape(*t.shape, dim)


def sinusoidal_embedding(
    timesteps,
    dim: int,
    convention: str | Convention = "adm",
    *,
    layout: str | None = None,
    first: str | None = None,
    freq_shift: float | None = None,
    max_period: float | None = None,
    scale: float | None = None,
    dtype: torch.dtype = torch.float32,
    precise: bool = False,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Embed timesteps of any shape ``[...]`` into ``[..., dim]``.

    Args:
        timesteps: Python number, (nested) list, numpy array or tensor; integer or floating,
            fractional values allowed. The output is on the tensor's device (or ``device``).
        dim: embedding width; an odd width gets a zero last column.
        convention: a preset name (``"adm"`` default: ``[cos | sin]``, shift 0, the convention of
            ADM, Stable Diffusion, DiT and diffusers' UNets; ``"ddpm"``, ``"vaswani"``, ``"edm"``, ...)
            or a :class:`Convention`. The keyword options below override single fields of it.
        layout: ``"concat"`` (two halves) or ``"interleaved"`` (pairs).
        first: ``"sin"`` or ``"cos"``: the function of the first half / the even columns.
        freq_shift: diffusers' ``downscale_freq_shift``: ``w_k = max_period ** (-k / (h - shift))``.
        max_period: the longest period, reached (shift 1) or approached (shift 0) by ``w_{h-1}``.
        scale: multiplies the argument: ``sin(scale * t * w_k)``.
        dtype: output dtype (float32 default; float64 implies ``precise``).
        precise: float64 phase and sin/cos, rounded once (max error ~6e-8 for |t| <= 1e6).

    Returns:
        Tensor ``[*timesteps.shape, dim]`` of ``dtype``.
    """
    conv = resolve_convention(
        convention, layout=layout, first=first, freq_shift=freq_shift, max_period=max_period, scale=scale
    )
    check_dim(dim, conv.freq_shift)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype (e.g. torch.float32), got {dtype!r}")
    precise = bool(precise) or dtype == torch.float64
    if isinstance(timesteps, torch.Tensor) and graph_mode(timesteps):
        t, value_range = _as_tensor(timesteps, device), None
    else:
        t, value_range = check_timesteps(timesteps, conv, precise, device)
    emb = _embed(t, value_range, dim, conv, precise)
    return emb if emb.dtype == dtype else emb.to(dtype)


def sinusoidal_embedding_np(timesteps, dim: int, convention: str | Convention = "adm", **options) -> np.ndarray:
    """Float64 numpy reference of :func:`sinusoidal_embedding` (same conventions), ``[..., dim]``.

    Written independently of the torch path: plain numpy, concatenation then reordering.
    """
    conv = resolve_convention(convention, **options)
    t = np.asarray(timesteps, dtype=np.float64)
    args = conv.scale * (t[..., None] * frequencies_np(dim, conv.freq_shift, conv.max_period))
    first, second = (np.sin(args), np.cos(args)) if conv.first == "sin" else (np.cos(args), np.sin(args))
    if conv.layout == "concat":
        emb = np.concatenate([first, second], axis=-1)
    else:
        emb = np.stack([first, second], axis=-1).reshape(*t.shape, 2 * (dim // 2))
    return np.concatenate([emb, np.zeros((*t.shape, dim % 2))], axis=-1)


def get_timestep_embedding(
    timesteps: torch.Tensor,
    embedding_dim: int,
    flip_sin_to_cos: bool = False,
    downscale_freq_shift: float = 1,
    scale: float = 1,
    max_period: int = 10000,
) -> torch.Tensor:
    """diffusers' ``get_timestep_embedding``: the same signature, defaults and numbers (``torch.equal``).

    Beyond diffusers: any batch shape ``[...] -> [..., embedding_dim]`` (diffusers asserts 1-D),
    and the eager guards of :func:`sinusoidal_embedding`.
    """
    traced = isinstance(timesteps, torch.Tensor) and graph_mode(timesteps)  # no lru_cache under dynamo
    make = convention_from_diffusers if traced else _diffusers_convention
    return sinusoidal_embedding(
        timesteps, embedding_dim, make(flip_sin_to_cos, downscale_freq_shift, scale, max_period)
    )


_diffusers_convention = lru_cache(maxsize=64)(convention_from_diffusers)
