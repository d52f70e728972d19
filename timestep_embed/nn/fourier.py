"""Gaussian random Fourier features: the time / noise-level encoding of score_sde NCSN++, EDM SongUNet,
k-diffusion and diffusers' ``GaussianFourierProjection``, with a fixed (buffer) or learnable ``weight``."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["FourierEmbedding"]


class FourierEmbedding(nn.Module):
    """Random Fourier features ``x [...] -> [..., dim]``: ``dim // 2`` frequencies ``w ~ N(0, std^2)``.

    The phase of frequency j is ``2 pi w_j x``, formed in one of two float orders (the results
    differ by rounding only):

    * ``fold_2pi=False``: ``(x * w) * 2 * pi`` (diffusers ``GaussianFourierProjection``, score_sde);
    * ``fold_2pi=True``: ``x * (2 * pi * w)`` (EDM ``FourierEmbedding``, k-diffusion ``FourierFeatures``).

    The output is ``[sin | cos]`` halves, or ``[cos | sin]`` with ``first="cos"`` (diffusers'
    ``flip_sin_to_cos=True``, EDM). :meth:`edm` is the EDM preset. ``weight`` [dim // 2] is
    diffusers' key: a persistent buffer, or a Parameter with ``learnable=True``. ``log=True``
    feeds ``ln(x)`` (diffusers' default for sigma inputs).

    Args:
        dim: output width, even.
        std: standard deviation of the frequencies (16 in diffusers UNet2DModel and EDM).
        first: ``"sin"`` or ``"cos"``, the first half.
        fold_2pi: the float order of the phase, see above.
        log: feed ``ln(x)``.
        learnable: ``weight`` as a Parameter instead of a buffer.
        generator: seeds the draw of ``weight``.
    """

    def __init__(
        self,
        dim: int,
        std: float = 16.0,
        *,
        first: str = "sin",
        fold_2pi: bool = False,
        log: bool = False,
        learnable: bool = False,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2 or dim % 2:
            raise ValueError(f"dim must be an even int >= 2 (sin and cos of dim // 2 features), got {dim!r}")
        if first not in ("sin", "cos"):
            raise ValueError(f"first must be 'sin' or 'cos', got {first!r}")
        self.dim, self.first, self.fold_2pi, self.log = dim, first, bool(fold_2pi), bool(log)
        weight = torch.randn(dim // 2, generator=generator) * std
        if learnable:
            self.weight = nn.Parameter(weight)
        else:
            self.register_buffer("weight", weight)

    @classmethod
    def edm(cls, dim: int, std: float = 16.0, **kwargs) -> FourierEmbedding:
        """EDM / k-diffusion preset: ``[cos | sin]`` of ``x * (2 pi w)``."""
        return cls(dim, std, first="cos", fold_2pi=True, **kwargs)

    def extra_repr(self) -> str:
        learnable = isinstance(self.weight, nn.Parameter)
        return f"dim={self.dim}, first={self.first!r}, fold_2pi={self.fold_2pi}, log={self.log}, learnable={learnable}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[...]`` -> ``[..., dim]`` in the dtype of ``x * weight``."""
        shape = x.shape
        x = x.reshape(-1)
        if not x.is_floating_point():
            x = x.float()
        if self.log:
            x = torch.log(x)
        if self.fold_2pi:
            phase = torch.outer(x, (2 * math.pi * self.weight).to(x.dtype))
        else:
            phase = x[:, None] * self.weight[None, :] * 2 * math.pi
        a, b = torch.sin(phase), torch.cos(phase)
        if self.first == "cos":
            a, b = b, a
        return torch.cat((a, b), dim=-1).reshape(*shape, self.dim)
