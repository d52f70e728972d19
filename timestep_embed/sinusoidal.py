"""The sinusoidal core: pure functions, no nn.Module.

With ``h = dim // 2`` and ``k = 0 .. h-1`` the frequencies are
``w_k = max_period ** (-k / (h - freq_shift))``; the embedding of ``t`` holds
``gain * sin(scale * t * w_k)`` and ``gain * cos(scale * t * w_k)``, arranged by the
[`Convention`][timestep_embed.Convention] (``[cos | sin]`` halves for the default ``"adm"``); an odd ``dim`` ends with a
zero column (``pad_odd=False``: ``2 * (dim // 2)`` columns, as lucidrains and EDM).

Compute paths, all in [`sinusoidal_embedding`][timestep_embed.sinusoidal_embedding]:

1. **float32**: exactly the operations of diffusers' ``get_timestep_embedding`` (float32
   frequencies ``exp(-ln(max_period) * arange(h) / (h - freq_shift))``, ``t[:, None].float() * w``,
   times ``scale``, ``sin``, ``cos``, one concatenation), so the numbers are bit-identical to
   diffusers wherever diffusers has the option. The frequencies are cached per device.
2. **precise** (``precise=True`` or ``dtype=torch.float64``): the same operations in float64,
   rounded once to ``dtype``. Max error 3e-8 (the float32 rounding) for |t| <= 1e6, where float32 loses
   ~6e-2 (the float32 phase is off by up to half an ulp of ``t * w_k``).
3. **distinct values**: a batch sharing one timestep (every sampling step), or a large batch of few
   distinct values (integer steps, per-token timesteps ``[B, tokens]``), is embedded once per
   distinct value by path 1 or 2 and gathered. sin and cos are elementwise, so every row has the
   bits path 1 or 2 would give it.

A large eager output is written by row blocks of path 1 or 2 into the output: the temporaries (phase,
sin, cos) exist for one block at a time, the bits are the same (elementwise operations again).

Paths 3 and the row blocks read the timesteps' values, which costs nothing for a CPU tensor and a host sync
for a tensor on an accelerator, where one pass of path 1 or 2 is also what measures fastest
(docs/benchmarks.md): so they run on the CPU only ([`host_values`][timestep_embed.modes.host_values]), and a
tensor on a GPU takes path 1 or 2 with no host sync, as diffusers' function.

Every call checks its options ([`check_options`][timestep_embed.guards.check_options]); eager calls on values
held on the host also check the values ([`check_timesteps`][timestep_embed.guards.check_timesteps]; on an
accelerator after ``set_value_checks("all")``). Under ``torch.jit.trace``, ``torch.compile``,
``torch.export``, on meta and fake tensors (``modes.graph_mode``), paths 1 and 2 run as they are, with
no data-dependent branch and no value check, exactly like diffusers' function; inputs that require grad are
checked but always take path 1 or 2, so d/dt is diffusers' d/dt.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import numpy as np
import torch

from .checks import check_bool, check_device, check_int, check_memory, real_array
from .conventions import Convention, convention_from_diffusers, resolve_convention
from .guards import (
    LowPrecisionTimestepWarning,
    TimestepsLike,
    as_tensor,
    check_options,
    check_timesteps,
    options_bound,
    scales_in_input_dtype,
    warn_half_on_device,
)
from .modes import cacheable, graph_mode, host_values, is_compiling, value_checks

__all__ = [
    "LowPrecisionTimestepWarning", "frequencies", "frequencies_np", "sinusoidal_embedding", "sinusoidal_embedding_np",
    "distinct_values", "get_timestep_embedding",
]  # fmt: skip

_DISTINCT_MIN_VALUES = 1 << 13  # smaller outputs are cheaper to compute than to deduplicate
_DISTINCT_MIN_ROWS = 512  # below, a sort to find distinct values costs more than it saves
_BLOCK_VALUES = 1 << 16  # output values per row block: a block's temporaries stay in cache
# smaller outputs are as fast in one pass (scripts/bench_precise.py); float64 temporaries outgrow the cache sooner
_BLOCK_MIN_VALUES = {False: 1 << 22, True: 1 << 20}
_SAME_SIZE_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}  # float timesteps' bits, for their sort


# ---------------------------------------------------------------------------------- frequencies
def _frequencies(half: int, freq_shift: float, max_period: float, dtype: torch.dtype, device) -> torch.Tensor:
    """``w_k`` [half] with diffusers' operations, in float32 or float64."""
    exponent = -math.log(max_period) * torch.arange(0, half, dtype=dtype, device=device)
    return torch.exp(exponent / (half - freq_shift))


_frequency_cache: dict[tuple, torch.Tensor] = {}


def _cached_frequencies(half: int, freq_shift: float, max_period: float, dtype: torch.dtype, device) -> torch.Tensor:
    """`_frequencies`, kept per (grid, dtype, device). Built outside inference mode and kept only
    when [`cacheable`][timestep_embed.modes.cacheable]: a tensor made under ``torch.inference_mode()`` would
    break every later d/dt, one made under a fake-tensor mode every later eager call."""
    key = (half, freq_shift, max_period, dtype, device)
    freqs = _frequency_cache.get(key)
    if freqs is None:
        with torch.inference_mode(False):
            freqs = _frequencies(half, freq_shift, max_period, dtype, device)
        if cacheable(freqs) and len(_frequency_cache) < 256:  # bounded: later grids are computed each call
            _frequency_cache[key] = freqs
    return freqs


def frequencies(dim: int, freq_shift: float = 0.0, max_period: float = 10000.0, *, device=None, precise=False):
    """Frequencies ``w_k`` [dim // 2]: float32 as diffusers computes them, or float64 (``precise``)."""
    conv = Convention(freq_shift=freq_shift, max_period=max_period)  # checks both
    check_options(dim, conv, precise=check_bool(precise, "precise"))
    dtype = torch.float64 if precise else torch.float32
    return _frequencies(dim // 2, conv.freq_shift, conv.max_period, dtype, check_device(device))


def frequencies_np(dim: int, freq_shift: float = 0.0, max_period: float = 10000.0) -> np.ndarray:
    """Float64 numpy reference frequencies ``w_k = max_period ** (-k / (h - freq_shift))`` [dim // 2]."""
    conv = Convention(freq_shift=freq_shift, max_period=max_period)  # checks both
    check_options(dim, conv, torch.float64, precise=True)
    half = dim // 2
    check_memory(f"dim={dim}", half, "float64 frequencies (dim // 2)", 8)
    return np.exp(-math.log(conv.max_period) * np.arange(half, dtype=np.float64) / (half - conv.freq_shift))


# -------------------------------------------------------------------------------- the embedding
def _direct(flat: torch.Tensor, dim: int, conv: Convention, precise: bool, eager: bool, pad: bool, dtype=None):
    """Paths 1 and 2: ``flat`` [N] -> [N, dim] in float32 (float64 when ``precise``), rounded once to ``dtype``.

    The phase is diffusers' ``t[:, None].float() * w[None, :]``; eagerly and without autograd it is
    formed by ``torch.outer``, the same products in one call. ``eager`` also caches the frequencies.
    """
    compute = torch.float64 if precise else torch.float32
    freqs = (_cached_frequencies if eager else _frequencies)(
        dim // 2, conv.freq_shift, conv.max_period, compute, flat.device
    )
    x = flat.double() if precise else flat.float()
    phase = torch.outer(x, freqs) if eager and not x.requires_grad else x[:, None] * freqs[None, :]
    if conv.scale != 1:  # diffusers multiplies by scale always; times 1 is exact either way
        phase = conv.scale * phase
    a, b = torch.sin(phase), torch.cos(phase)
    if conv.first == "cos":
        a, b = b, a
    emb = torch.cat((a, b), dim=-1) if conv.layout == "concat" else torch.stack((a, b), dim=-1).flatten(-2)
    if conv.gain != 1:
        emb = conv.gain * emb
    if dim % 2 and pad:
        emb = torch.nn.functional.pad(emb, (0, 1))
    return emb if dtype in (None, emb.dtype) else emb.to(dtype)  # Tensor.to costs microseconds even as a no-op


def _blocks(flat: torch.Tensor, dim: int, conv: Convention, precise: bool, pad: bool, dtype) -> torch.Tensor:
    """Path 1 or 2 on row blocks, each rounded once into the ``dtype`` output ``[N, width]`` (one pass
    for a small output)."""
    n, rows = flat.shape[0], max(1, _BLOCK_VALUES // dim)
    if n * dim < _BLOCK_MIN_VALUES[precise]:
        return _direct(flat, dim, conv, precise, True, pad, dtype)
    out = torch.empty(n, dim if pad else 2 * (dim // 2), dtype=dtype, device=flat.device)
    for start in range(0, n, rows):
        out[start : start + rows] = _direct(flat[start : start + rows], dim, conv, precise, True, pad)
    return out


def _distinct(flat: torch.Tensor, low: float, high: float) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(values, index)`` with ``flat == values[index]`` when few values repeat, else None."""
    n = flat.shape[0]
    if n < _DISTINCT_MIN_ROWS:
        return None
    if not (flat.is_floating_point() or flat.dtype.is_signed):  # torch sorts no unsigned dtype but uint8
        if high >= 2**63:
            return None
        flat = flat.long()  # the same integers: the values embed to the same bits
    if flat.is_floating_point():
        if len(set(flat[:256].tolist())) > 64:  # the first rows are mostly distinct: skip the sort
            return None
        # distinct bit patterns, not values: -0.0 == 0.0, yet sin(-0.0) is -0.0
        bits, index = torch.unique(flat.view(_SAME_SIZE_INT[flat.element_size()]), return_inverse=True)
        values = bits.view(flat.dtype)
    elif (high - low + 1) * 2 > n:  # integers: the range alone bounds the distinct count
        return None
    else:
        values, index = torch.unique(flat, return_inverse=True)
    return (values, index) if 2 * values.shape[0] <= n else None


def distinct_values(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(values, index)`` with ``t.reshape(-1) == values[index]`` when ``t`` is an eager CPU tensor of at least
    512 entries and at most half as many distinct values; None otherwise (in graph mode, and on an accelerator,
    where finding them would cost a host sync).

    The one reuse mechanism of the package: the core embeds ``values`` and gathers; the
    [`TimestepEmbedder`][timestep_embed.TimestepEmbedder] runs the sinusoid and the MLP on them (per-token
    timesteps ``[B, tokens]``).
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"t must be a torch.Tensor, got {type(t).__name__}")
    if not host_values(t):  # first: under export even reading the size would specialize a dynamic batch
        return None
    flat = t.reshape(-1)
    if flat.shape[0] < _DISTINCT_MIN_ROWS:
        return None
    # the sort keeps a copy, its order and the inverse index: refused by name before it, where it cannot fit
    check_memory("timesteps", flat.shape[0], "values to sort for their distinct ones", 32, t.device)
    if flat.is_floating_point():
        return _distinct(flat, 0.0, 0.0)
    low, high = torch.aminmax(flat if flat.dtype.is_signed else flat.double())  # aminmax: no unsigned kernels
    return _distinct(flat, low.item(), high.item())


def _embed(
    t: torch.Tensor, value_range, dim: int, conv: Convention, precise: bool, pad: bool, dtype, eager: bool
) -> torch.Tensor:
    """[...] -> [..., width] in ``dtype`` by paths 1-3 (path 3 and row blocks only on the CPU, with a
    ``value_range``)."""
    flat = t if t.dim() == 1 else t.reshape(-1)
    n = flat.shape[0]
    if value_range is None or not flat.is_cpu or t.requires_grad or n * dim < _DISTINCT_MIN_VALUES:
        emb = _direct(flat, dim, conv, precise, eager, pad, dtype)
    elif value_range[0] == value_range[1] and (value_range[0] != 0 or not flat.is_floating_point()):
        # one timestep for the whole batch (float zeros may mix 0.0 and -0.0: the distinct path tells them apart)
        emb = _direct(flat[:1], dim, conv, precise, eager, pad, dtype).expand(n, -1).clone()
    else:
        distinct = _distinct(flat, *value_range)
        if distinct is None:
            emb = _blocks(flat, dim, conv, precise, pad, dtype)
        else:
            emb = _direct(distinct[0], dim, conv, precise, eager, pad, dtype).index_select(0, distinct[1])
    return emb if t.dim() == 1 else emb.reshape(*t.shape, emb.shape[-1])


def sinusoidal_embedding(
    timesteps: TimestepsLike,
    dim: int,
    convention: str | Convention = "adm",
    *,
    layout: str | None = None,
    first: str | None = None,
    freq_shift: float | None = None,
    max_period: float | None = None,
    scale: float | None = None,
    gain: float | None = None,
    dtype: torch.dtype = torch.float32,
    precise: bool = False,
    pad_odd: bool = True,
    scale_in_input_dtype: bool = False,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Embed timesteps of any shape ``[...]`` into ``[..., dim]``.

    Args:
        timesteps: Python number, (nested) list, numpy array or tensor; integer or floating,
            fractional values allowed. The output is on the tensor's device (or ``device``).
        dim: embedding width; an odd width gets a zero last column.
        convention: a preset name (``"adm"`` default: ``[cos | sin]``, shift 0, the convention of
            ADM, Stable Diffusion, DiT and diffusers' UNets; ``"ddpm"``, ``"vaswani"``, ``"edm"``, ...)
            or a [`Convention`][timestep_embed.Convention]. The keyword options below override single fields of it.
        layout: ``"concat"`` (two halves) or ``"interleaved"`` (pairs).
        first: ``"sin"`` or ``"cos"``: the function of the first half / the even columns.
        freq_shift: diffusers' ``downscale_freq_shift``: ``w_k = max_period ** (-k / (h - shift))``.
        max_period: the longest period, reached (shift 1) or approached (shift 0) by ``w_{h-1}``.
        scale: multiplies the argument: ``sin(scale * t * w_k)``.
        gain: multiplies the output.
        dtype: output dtype (float32 default; float64 implies ``precise``).
        precise: float64 phase and sin/cos, rounded once (max error 3e-8 for |t| <= 1e6).
        pad_odd: an odd ``dim`` ends with a zero column (diffusers, ADM); False returns
            ``2 * (dim // 2)`` columns (lucidrains' ``SinusoidalPosEmb``, EDM's ``PositionalEmbedding``).
        scale_in_input_dtype: form ``scale * t`` in the dtype of floating ``t`` before the phase
            (black-forest-labs/flux ``timestep_embedding``: ``time_factor * t`` in bfloat16 turns
            sigma 0.99 into 988, not 990); default: inside the float32 (float64) phase.

    Returns:
        Tensor ``[*timesteps.shape, dim]`` (``2 * (dim // 2)`` columns with ``pad_odd=False``) of ``dtype``.
    """
    conv = resolve_convention(
        convention, layout=layout, first=first, freq_shift=freq_shift, max_period=max_period, scale=scale, gain=gain
    )
    precise = check_bool(precise, "precise") or dtype == torch.float64
    pad_odd, in_input_dtype = check_bool(pad_odd, "pad_odd"), check_bool(scale_in_input_dtype, "scale_in_input_dtype")
    t, value_range = as_tensor(timesteps, device), None
    eager, in_input_dtype = not graph_mode(t), scales_in_input_dtype(in_input_dtype, t, conv)
    if not eager:  # no lru_cache under dynamo (torch 2.2's cannot trace one)
        check_options(dim, conv, dtype, precise)
    else:
        bound, width = options_bound(dim, conv, dtype, precise), dim if pad_odd else 2 * (dim // 2)
        if t.numel() * width * dtype.itemsize > 1 << 30:  # sizes from the shape alone: no value is read
            check_memory("timesteps", t.numel(), f"rows of {width} {str(dtype)[6:]}", width * dtype.itemsize, t.device)
        if t.is_cpu or value_checks() == "all":  # = reads_values(t) in eager mode; an empty batch's range: (0, 0)
            value_range = check_timesteps(t, conv, precise, max_frequency=bound, scale_in_input_dtype=in_input_dtype)
            value_range = value_range or (0.0, 0.0)
        elif not in_input_dtype:  # on an accelerator: no read, no sync (diffusers' function reads nothing either)
            warn_half_on_device(t)  # (with in_input_dtype the rounding of t's dtype is what is asked for)
    if in_input_dtype:
        t, conv = conv.scale * t, replace(conv, scale=1.0)  # in t's dtype, as Flux (value_range bounds ints only)
    return _embed(t, value_range, dim, conv, precise, pad_odd, dtype, eager)


def sinusoidal_embedding_np(
    timesteps: TimestepsLike, dim: int, convention: str | Convention = "adm", **options
) -> np.ndarray:
    """Float64 numpy reference of [`sinusoidal_embedding`][timestep_embed.sinusoidal_embedding] (same conventions),
    ``[..., dim]``.

    Written independently of the torch path: plain numpy, concatenation then reordering.
    """
    conv = resolve_convention(convention, **options)
    t = real_array(timesteps, "timesteps").astype(np.float64)
    bound = check_options(dim, conv, torch.float64, precise=True)
    check_memory("timesteps", t.size, f"rows of {dim} float64", dim * 8)  # as the torch path: from the sizes alone
    check_timesteps(torch.from_numpy(t), conv, precise=True, max_frequency=bound)  # the torch path's guards
    args = conv.scale * (t[..., None] * frequencies_np(dim, conv.freq_shift, conv.max_period))
    first, second = (np.sin(args), np.cos(args)) if conv.first == "sin" else (np.cos(args), np.sin(args))
    first, second = conv.gain * first, conv.gain * second
    if conv.layout == "concat":
        emb = np.concatenate([first, second], axis=-1)
    else:
        emb = np.stack([first, second], axis=-1).reshape(*t.shape, 2 * (dim // 2))
    return np.concatenate([emb, np.zeros((*t.shape, dim % 2))], axis=-1)


def get_timestep_embedding(
    timesteps: TimestepsLike,
    embedding_dim: int,
    flip_sin_to_cos: bool = False,
    downscale_freq_shift: float = 1,
    scale: float = 1,
    max_period: int = 10000,
) -> torch.Tensor:
    """diffusers' ``get_timestep_embedding``: the same signature, defaults and numbers (``torch.equal``).

    Beyond diffusers: any batch shape ``[...] -> [..., embedding_dim]`` (diffusers asserts 1-D),
    and the eager guards of [`sinusoidal_embedding`][timestep_embed.sinusoidal_embedding].
    """
    check_int(embedding_dim, "embedding_dim")
    flags = (flip_sin_to_cos, downscale_freq_shift, scale, max_period)
    if is_compiling():  # no lru_cache under dynamo
        return sinusoidal_embedding(timesteps, embedding_dim, convention_from_diffusers(*flags))
    try:
        conv = _diffusers_convention(*flags)  # the flags are the cache key
    except TypeError:  # unhashable flags (a list): the function itself names the one that is wrong
        conv = convention_from_diffusers(*flags)
    return sinusoidal_embedding(timesteps, embedding_dim, conv)


_diffusers_convention = lru_cache(maxsize=64, typed=True)(convention_from_diffusers)  # typed: True is not 1
