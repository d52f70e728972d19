"""Gaussian random Fourier features: the time/noise-level encoding of score_sde NCSN++, EDM SongUNet
and diffusers' ``GaussianFourierProjection``, with a fixed (buffer) or learnable ``weight``."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["FourierEmbedding"]


class FourierEmbedding(nn.Module):
    """Random Fourier features ``x [...] -> [..., dim]`` with ``w ~ N(0, scale^2)``, ``dim // 2`` of them.

    ``style="diffusers"``: phases ``x[:, None] * w * 2 * pi`` (diffusers
    ``GaussianFourierProjection``, score_sde NCSN++), ``first="sin"`` unless flipped.
    ``style="edm"``: phases ``x.ger(2 * pi * w)`` then ``[cos, sin]`` (EDM ``FourierEmbedding``
    used by SongUNet/NCSN++; k-diffusion ``FourierFeatures`` has the same layout). Use
    :meth:`edm` for that preset.

    The frequencies are ``weight`` [dim // 2] (diffusers' key): a persistent buffer, or a
    Parameter when ``learnable=True``. ``log=True`` feeds ``ln(x)`` (diffusers' default for
    sigma inputs).

    Args:
        dim: output width, even.
        scale: std of the frequencies (16 in diffusers UNet2DModel and EDM).
        first: ``"sin"`` or ``"cos"``; diffusers' ``flip_sin_to_cos=True`` is ``"cos"``.
        log, learnable, style: see above. ``generator``: seeds the draw.
    """

    def __init__(
        self,
        dim: int,
        scale: float = 16.0,
        *,
        first: str = "sin",
        log: bool = False,
        learnable: bool = False,
        style: str = "diffusers",
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2 or dim % 2:
            raise ValueError(f"dim must be an even int >= 2 (sin and cos of dim // 2 features), got {dim!r}")
        if first not in ("sin", "cos"):
            raise ValueError(f"first must be 'sin' or 'cos', got {first!r}")
        if style not in ("diffusers", "edm"):
            raise ValueError(f"style must be 'diffusers' or 'edm', got {style!r}")
        self.dim, self.first, self.log, self.style = dim, first, bool(log), style
        weight = torch.randn(dim // 2, generator=generator) * scale
        if learnable:
            self.weight = nn.Parameter(weight)
        else:
            self.register_buffer("weight", weight)

    @classmethod
    def edm(cls, dim: int, scale: float = 16.0, **kwargs) -> FourierEmbedding:
        """EDM/k-diffusion style: ``[cos, sin]`` of ``x.ger(2 pi w)``."""
        return cls(dim, scale, first="cos", style="edm", **kwargs)

    def extra_repr(self) -> str:
        learnable = isinstance(self.weight, nn.Parameter)
        return f"dim={self.dim}, first={self.first!r}, log={self.log}, style={self.style!r}, learnable={learnable}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[...]`` float -> ``[..., dim]`` in the dtype of ``x * weight``."""
        shape = x.shape
        x = x.reshape(-1)
        if not x.is_floating_point():
            x = x.float()
        if self.log:
            x = torch.log(x)
        if self.style == "edm":
            args = torch.outer(x, (2 * math.pi * self.weight).to(x.dtype))
        else:
            args = x[:, None] * self.weight[None, :] * 2 * math.pi
        a, b = torch.sin(args), torch.cos(args)
        if self.first == "cos":
            a, b = b, a
        return torch.cat((a, b), dim=-1).reshape(*shape, self.dim)
