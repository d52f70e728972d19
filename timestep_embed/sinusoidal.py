"""The sinusoidal core: pure functions, no nn.Module.

With ``h = dim // 2`` and ``k = 0 .. h-1`` the frequencies are

    w_k = max_period ** (-k / (h - freq_shift))

and the embedding of a timestep ``t`` holds ``sin(scale * t * w_k)`` and ``cos(scale * t * w_k)``
for every k, arranged by ``layout`` and ``first``:

* ``layout="concat", first="sin"``: ``[sin_0 .. sin_{h-1}, cos_0 .. cos_{h-1}]`` (DDPM)
* ``layout="concat", first="cos"``: ``[cos_0 .. cos_{h-1}, sin_0 .. sin_{h-1}]`` (ADM / LDM)
* ``layout="interleaved", first="sin"``: ``[sin_0, cos_0, sin_1, cos_1, ...]`` (Vaswani et al.)

An odd ``dim`` gets one zero column at the end, as diffusers does.

The default path computes the argument in float32 with exactly the operations of
``diffusers.models.embeddings.get_timestep_embedding``, so its numbers are bit-identical to
diffusers wherever diffusers has the option. ``precise=True`` forms the argument in float64
(then float64 sin for small outputs, or a float32 sin/cos corrected to first order by the
argument's float32 rounding error for large ones; see ``_precise``): max error <= 1e-7 against
the float64 reference for |t| <= 1e6, where the float32 path loses ~5e-2 (the float32 argument
itself is off by up to half an ulp of t * w_k).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from ._kernels import Plan, embed, float32_frequencies, float64_frequencies
from .conventions import Convention, convention_from_diffusers, resolve_convention
from .validation import check_dim, checked_timesteps

__all__ = [
    "frequencies",
    "frequencies_np",
    "sinusoidal_embedding",
    "sinusoidal_embedding_np",
    "get_timestep_embedding",
    "SinusoidalTable",
]


# --------------------------------------------------------------------------------------------
# frequencies
# --------------------------------------------------------------------------------------------
def frequencies_np(dim: int, freq_shift: float = 0.0, max_period: float = 10000.0) -> np.ndarray:
    """Float64 reference frequencies ``w_k = max_period ** (-k / (h - freq_shift))``, shape [h]."""
    check_dim(dim, freq_shift)
    return float64_frequencies(dim // 2, freq_shift, max_period)


def frequencies(
    dim: int,
    freq_shift: float = 0.0,
    max_period: float = 10000.0,
    *,
    device: torch.device | str | None = None,
    precise: bool = False,
) -> torch.Tensor:
    """Frequencies ``w_k``, shape [dim // 2]: float32 computed as diffusers does, or float64."""
    check_dim(dim, freq_shift)
    if precise:
        return torch.from_numpy(float64_frequencies(dim // 2, freq_shift, max_period)).to(device)
    return float32_frequencies(dim // 2, freq_shift, max_period, device)


# --------------------------------------------------------------------------------------------
# the embedding
# --------------------------------------------------------------------------------------------
@lru_cache(maxsize=1024)
def _plan(dim, convention, layout, first, freq_shift, max_period, scale, dtype, precise) -> Plan:
    conv = resolve_convention(
        convention, layout=layout, first=first, freq_shift=freq_shift, max_period=max_period, scale=scale
    )
    return Plan(dim, conv, dtype, precise)


def _get_plan(*options) -> Plan:
    try:
        return _plan(*options)
    except TypeError as err:  # an unhashable argument: build uncached for the clear message
        if "unhashable" not in str(err):
            raise
        return _plan.__wrapped__(*options)


def sinusoidal_embedding(
    timesteps,
    dim: int,
    convention: str | Convention | None = None,
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
        timesteps: Python number, list, numpy array or torch tensor; integer or floating,
            fractional values allowed. The output is on the tensor's device (or ``device``).
        dim: embedding width; odd widths get a zero last column.
        convention: a preset name (``"vaswani"``, ``"ddpm"``, ``"adm"``, ``"edm"``, ...) or a
            :class:`Convention`; default ``"ddpm"`` (diffusers' function defaults). The keyword
            options below override single fields of it.
        layout: ``"concat"`` (two halves) or ``"interleaved"`` (pairs).
        first: ``"sin"`` or ``"cos"``: which function comes first (first half / even index).
        freq_shift: diffusers' ``downscale_freq_shift``: ``w_k = max_period**(-k/(h - shift))``.
        max_period: the longest period, reached (shift 1) or approached (shift 0) by w_{h-1}.
        scale: multiplies the argument: ``sin(scale * t * w_k)``.
        dtype: output dtype (float32 default; float64 implies ``precise``).
        precise: form the argument in float64 (max error ~7e-8 against the float64 reference
            for any |t| <= 1e6; ~3e-8 for small outputs and integer timesteps).

    Returns:
        Tensor ``[*timesteps.shape, dim]`` of ``dtype``.
    """
    plan = _get_plan(dim, convention, layout, first, freq_shift, max_period, scale, dtype, precise)
    t, value_range = checked_timesteps(timesteps, device=device)
    if t.dim() == 1:
        return embed(t, plan, value_range)
    return embed(t.reshape(-1), plan, value_range).reshape(*t.shape, dim)


def sinusoidal_embedding_np(timesteps, dim: int, convention: str | Convention | None = None, **options) -> np.ndarray:
    """Float64 numpy reference of :func:`sinusoidal_embedding` (same conventions), [..., dim].

    Written independently of the torch path: plain numpy, concatenation then reordering.
    """
    conv = resolve_convention(convention, **options)
    check_dim(dim, conv.freq_shift)
    t = np.asarray(timesteps, dtype=np.float64)
    half = dim // 2
    args = conv.scale * (t[..., None] * frequencies_np(dim, conv.freq_shift, conv.max_period))
    first, second = (np.sin(args), np.cos(args)) if conv.first == "sin" else (np.cos(args), np.sin(args))
    if conv.layout == "concat":
        emb = np.concatenate([first, second], axis=-1)
    else:
        emb = np.stack([first, second], axis=-1).reshape(*t.shape, 2 * half)
    if dim % 2 == 1:
        emb = np.concatenate([emb, np.zeros((*t.shape, 1))], axis=-1)
    return emb


# --------------------------------------------------------------------------------------------
# drop-in replacement for diffusers.models.embeddings.get_timestep_embedding
# --------------------------------------------------------------------------------------------
def get_timestep_embedding(
    timesteps: torch.Tensor,
    embedding_dim: int,
    flip_sin_to_cos: bool = False,
    downscale_freq_shift: float = 1,
    scale: float = 1,
    max_period: int = 10000,
) -> torch.Tensor:
    """Same signature and the same numbers (``torch.equal``) as diffusers' function, faster.

    Accepts any batch shape (diffusers asserts 1-D); returns ``[..., embedding_dim]`` float32.
    """
    plan = _diffusers_plan(embedding_dim, bool(flip_sin_to_cos), downscale_freq_shift, scale, max_period)
    t, value_range = checked_timesteps(timesteps)
    if t.dim() == 1:
        return embed(t, plan, value_range)
    return embed(t.reshape(-1), plan, value_range).reshape(*t.shape, embedding_dim)


@lru_cache(maxsize=256)
def _diffusers_plan(dim, flip_sin_to_cos, downscale_freq_shift, scale, max_period) -> Plan:
    return Plan(
        dim,
        convention_from_diffusers(flip_sin_to_cos, downscale_freq_shift, scale, max_period),
        torch.float32,
        precise=False,
    )


# --------------------------------------------------------------------------------------------
# lookup table for integer timesteps in a known range
# --------------------------------------------------------------------------------------------
class SinusoidalTable:
    """Precomputed embeddings of the integer timesteps ``0 .. num_positions - 1``.

    ``table(t)`` gathers rows: one ``index_select`` instead of the sin/cos path. The rows are
    computed by :func:`sinusoidal_embedding` itself, so values are identical to the direct path
    (sin/cos are elementwise and position-independent in torch's CPU and CUDA kernels).

    Args:
        num_positions: T; valid timesteps are the integers 0 .. T-1.
        dim, convention, options, dtype, precise, device: as in :func:`sinusoidal_embedding`.
    """

    def __init__(
        self,
        num_positions: int,
        dim: int,
        convention: str | Convention | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        precise: bool = False,
        device: torch.device | str | None = None,
        **options,
    ):
        if not isinstance(num_positions, int) or isinstance(num_positions, bool) or num_positions < 1:
            raise ValueError(f"num_positions must be a positive int, got {num_positions!r}")
        self.num_positions = num_positions
        self.dim = dim
        positions = torch.arange(num_positions, device=device)
        self.table = sinusoidal_embedding(positions, dim, convention, dtype=dtype, precise=precise, **options)

    def to(self, device) -> SinusoidalTable:
        self.table = self.table.to(device)
        return self

    def __call__(self, timesteps: torch.Tensor) -> torch.Tensor:
        """Rows for integer ``timesteps`` of any shape ``[...]`` -> ``[..., dim]``."""
        if not isinstance(timesteps, torch.Tensor):
            timesteps = torch.as_tensor(timesteps, device=self.table.device)
        if timesteps.dtype not in _INDEX_DTYPES:
            raise TypeError(
                f"SinusoidalTable takes integer timesteps, got dtype {timesteps.dtype}; "
                "use sinusoidal_embedding for fractional timesteps"
            )
        flat = timesteps if timesteps.dim() == 1 else timesteps.reshape(-1)
        try:
            rows = torch.index_select(self.table, 0, flat)
        except (IndexError, RuntimeError) as err:
            lo, hi = int(timesteps.min()), int(timesteps.max())
            raise IndexError(
                f"timesteps must lie in [0, {self.num_positions - 1}] for this table, got values in [{lo}, {hi}]"
            ) from err
        return rows if timesteps.dim() == 1 else rows.reshape(*timesteps.shape, self.dim)


_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
