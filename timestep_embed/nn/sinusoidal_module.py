"""The sinusoid as a module: ``t [...] -> [..., dim]`` with the numbers of
[`sinusoidal_embedding`][timestep_embed.sinusoidal_embedding]."""

from __future__ import annotations

import torch
from torch import nn

from ..checks import check_bool, check_int, check_memory
from ..conventions import Convention, resolve_convention
from ..guards import TimestepsLike, check_options
from ..modes import cacheable, host_values
from ..sinusoidal import sinusoidal_embedding

__all__ = ["SinusoidalEmbedding"]


class SinusoidalEmbedding(nn.Module):
    """Sinusoidal embedding ``t [...] -> float32 [..., dim]``:
    [`sinusoidal_embedding`][timestep_embed.sinusoidal_embedding] as a module.

    No parameters and no buffers: the state dict is empty, ``.to()``/``.half()`` change nothing
    (the output stays float32, as diffusers' ``Timesteps``).

    With ``num_timesteps=T`` it keeps the module's one integer-step cache: the rows of ``0 .. T-1``,
    computed by the core on first use (bit-identical to it). An eager call with an integer CPU tensor
    ``t`` inside that range is then one row gather, which reads no value (the gather itself refuses an
    index outside the range, and the core takes that call). Anything else (floating ``t``, tensors on an
    accelerator, where the rows would have to be checked or copied there; tracing, compiling, export,
    meta or fake tensors) calls the core.

    Args:
        dim: output width (odd widths end with a zero column, unless ``pad_odd=False``).
        convention: preset name or [`Convention`][timestep_embed.Convention]; default ``"adm"`` (``[cos | sin]``, shift
            0).
        layout: overrides ``convention``'s layout: ``"concat"`` or ``"interleaved"``.
        first: overrides which half comes first: ``"sin"`` or ``"cos"``.
        freq_shift: overrides ``convention``'s frequency shift.
        max_period: overrides ``convention``'s max period.
        scale: overrides ``convention``'s input scale.
        gain: overrides ``convention``'s output gain.
        precise: float64 phase and sin/cos, rounded once (see the core).
        num_timesteps: T of the integer-step cache (None: no cache).
        pad_odd: False: an odd ``dim`` gives ``dim - 1`` columns (lucidrains, EDM); see `out_dim`.
        scale_in_input_dtype: form ``scale * t`` in floating ``t``'s dtype (Flux), see the core.
    """

    def __init__(
        self,
        dim: int,
        convention: str | Convention = "adm",
        *,
        layout: str | None = None,
        first: str | None = None,
        freq_shift: float | None = None,
        max_period: float | None = None,
        scale: float | None = None,
        gain: float | None = None,
        precise: bool = False,
        num_timesteps: int | None = None,
        pad_odd: bool = True,
        scale_in_input_dtype: bool = False,
    ):
        super().__init__()
        self.convention = resolve_convention(
            convention, layout=layout, first=first, freq_shift=freq_shift, max_period=max_period, scale=scale, gain=gain
        )
        precise = check_bool(precise, "precise")
        check_options(dim, self.convention, precise=precise)
        self.dim, self.precise, self.num_timesteps = dim, precise, num_timesteps
        self.pad_odd, self.scale_in_input_dtype = (
            check_bool(pad_odd, "pad_odd"),
            check_bool(scale_in_input_dtype, "scale_in_input_dtype"),
        )
        self.out_dim = dim if self.pad_odd else 2 * (dim // 2)  # the width of the output
        if num_timesteps is not None:  # the cache's float32 rows on the CPU, refused here when they cannot fit
            check_int(num_timesteps, "num_timesteps")
            check_memory("num_timesteps", num_timesteps, f"cached rows of {self.out_dim} float32", 4 * self.out_dim)
        self._rows: torch.Tensor | None = None  # [T, dim] on the CPU; not state, not a buffer

    def extra_repr(self) -> str:
        c = self.convention
        return (
            f"dim={self.dim}, layout={c.layout!r}, first={c.first!r}, freq_shift={c.freq_shift}, "
            f"max_period={c.max_period}, scale={c.scale}, gain={c.gain}, precise={self.precise}, "
            f"num_timesteps={self.num_timesteps}"
            + ("" if self.pad_odd else ", pad_odd=False")
            + (", scale_in_input_dtype=True" if self.scale_in_input_dtype else "")
        )

    def options(self) -> dict:
        """The keyword options of the core call (for [`sinusoidal_embedding`][timestep_embed.sinusoidal_embedding])."""
        return {"precise": self.precise, "pad_odd": self.pad_odd, "scale_in_input_dtype": self.scale_in_input_dtype}

    def forward(self, t: TimestepsLike) -> torch.Tensor:
        """``t`` ``[...]`` (int or float; a Python number or array too) -> float32 ``[..., dim]``."""
        if isinstance(t, torch.Tensor) and self._uses_cache(t):
            rows = self._cached_rows()
            try:  # a row gather: [N] -> [N, dim], or [...] -> [..., dim]; a CPU gather checks its indices itself
                return rows.index_select(0, t) if t.dim() == 1 else nn.functional.embedding(t, rows)
            except IndexError:  # a step outside 0 .. T-1 (negative too): the core embeds (or refuses) it
                pass
        return sinusoidal_embedding(t, self.dim, self.convention, **self.options())

    def _uses_cache(self, t: torch.Tensor) -> bool:
        """Whether ``t`` is an eager, non-empty integer CPU tensor and this module has a cache."""
        return (
            self.num_timesteps is not None
            and t.dtype in (torch.int64, torch.int32)  # the index dtypes of a row gather
            and t.numel() > 0
            and host_values(t)
        )

    def _cached_rows(self) -> torch.Tensor:
        """The rows of ``0 .. T-1`` [T, dim] (CPU), computed by the core on first use."""
        if self._rows is None:
            steps = torch.arange(int(self.num_timesteps or 0), device="cpu")  # CPU, whatever the default device
            with torch.inference_mode(False):  # rows made in inference mode would break later autograd
                rows = sinusoidal_embedding(steps, self.dim, self.convention, **self.options())
            if not cacheable(rows):
                return rows
            self._rows = rows
        return self._rows
