"""Gaussian random Fourier features: the time / noise-level encoding of score_sde NCSN++, EDM SongUNet,
k-diffusion and diffusers' ``GaussianFourierProjection``, with a fixed (buffer) or learnable ``weight``."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..checks import check_bool, check_choice, check_int, check_real
from ..guards import TimestepsLike, as_tensor, value_range
from ..modes import reads_values

__all__ = ["FourierEmbedding"]


class FourierEmbedding(nn.Module):
    """Random Fourier features ``x [...] -> [..., dim]``: ``dim // 2`` frequencies ``w ~ N(0, std^2)``.

    The phase of frequency j is ``2 pi w_j x``, formed in one of two float orders (the results
    differ by rounding only):

    * ``fold_2pi=False``: ``(x * w) * 2 * pi`` (diffusers ``GaussianFourierProjection``, score_sde,
      lucidrains' ``RandomOrLearnedSinusoidalPosEmb``);
    * ``fold_2pi=True``: ``x * (2 * pi * w)`` (EDM ``FourierEmbedding``).

    With ``in_features=F`` the input is ``[..., F]`` (several features at once, or k-diffusion's
    ``[B, 1]``), ``weight`` is ``[dim // 2, F]`` and the phase is ``(2 pi x) @ weight.T``, as
    k-diffusion's ``FourierFeatures`` forms it. ``include_input=True`` puts ``x`` itself first:
    ``[x | sin | cos]``, ``dim + 1`` columns (lucidrains).

    The output is ``[sin | cos]`` halves, or ``[cos | sin]`` with ``first="cos"`` (diffusers'
    ``flip_sin_to_cos=True``, EDM). [`edm`][timestep_embed.nn.fourier.FourierEmbedding.edm] is the EDM preset.
    ``weight`` [dim // 2] is diffusers' key: a persistent buffer, or a Parameter with ``learnable=True``. ``log=True``
    feeds ``ln(x)`` (diffusers' default for sigma inputs).

    Args:
        dim: output width, even.
        std: standard deviation of the frequencies (16 in diffusers UNet2DModel and EDM).
        first: ``"sin"`` or ``"cos"``, the first half.
        fold_2pi: the float order of the phase, see above.
        log: feed ``ln(x)``.
        learnable: ``weight`` as a Parameter instead of a buffer.
        generator: seeds the draw of ``weight``.
        in_features: features per input row (None: every entry of ``x`` is one input).
        include_input: prepend ``x`` to the features (needs ``in_features`` None or 1).
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
        in_features: int | None = None,
        include_input: bool = False,
    ):
        super().__init__()
        if check_int(dim, "dim", 2) % 2:
            raise ValueError(f"dim must be an even int >= 2 (sin and cos of dim // 2 features), got {dim!r}")
        std = check_real(std, "std", positive=True)
        check_choice(first, "first", ("sin", "cos"))
        fold_2pi, log, learnable = (
            check_bool(fold_2pi, "fold_2pi"),
            check_bool(log, "log"),
            check_bool(learnable, "learnable"),
        )
        include_input = check_bool(include_input, "include_input")
        if in_features is not None:
            check_int(in_features, "in_features")
        if include_input and in_features not in (None, 1):
            raise ValueError(f"include_input prepends the one input feature; in_features={in_features} has several")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        self.dim, self.first, self.fold_2pi, self.log = dim, first, bool(fold_2pi), bool(log)
        self.in_features, self.include_input = in_features, bool(include_input)
        self.out_dim = dim + 1 if include_input else dim  # the width of the output
        shape = (dim // 2,) if in_features is None else (dim // 2, in_features)
        weight = torch.randn(shape, generator=generator) * std
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
        extra = "" if self.in_features is None else f", in_features={self.in_features}"
        extra += ", include_input=True" if self.include_input else ""
        return (
            f"dim={self.dim}, first={self.first!r}, fold_2pi={self.fold_2pi}, log={self.log}, "
            f"learnable={learnable}{extra}"
        )

    def forward(self, x: TimestepsLike) -> torch.Tensor:
        """``x`` ``[...]`` (``[..., in_features]``) -> ``[..., out_dim]`` in the dtype of ``x * weight``.

        ``x`` is a tensor on the weight's device, or numbers (put there, floats in the weight's dtype, as the
        sinusoid gives float32 for them); its values must be finite, and > 0 with ``log=True`` (checked eagerly
        where they are on the host, see ``modes.reads_values``). Integer ``x`` is formed in the weight's dtype, as
        diffusers' ``GaussianFourierProjection`` multiplies it (float32 after ``log``, and for ``fold_2pi`` and
        ``in_features``).
        """
        numbers = not isinstance(x, torch.Tensor)
        x = as_tensor(x, self.weight.device if numbers else None, "x")
        if numbers and x.is_floating_point():
            x = x.to(self.weight.dtype)
        if x.device != self.weight.device:
            raise ValueError(f"x is on {x.device} but the module's weight is on {self.weight.device}: move one of them")
        if x.numel() and reads_values(x):
            low, high, _ = value_range(x.reshape(-1))
            if not (math.isfinite(low) and math.isfinite(high)):
                raise ValueError("x must be finite, got NaN or inf")
            if self.log and low <= 0:
                raise ValueError(f"x must be > 0 with log=True (the features are of ln x), got values down to {low:g}")
        if self.in_features is not None:
            if x.dim() == 0 or x.shape[-1] != self.in_features:
                raise ValueError(f"x must be [..., {self.in_features}] (in_features), got shape {tuple(x.shape)}")
            shape = x.shape[:-1]
            x = x.reshape(-1, self.in_features)
        else:
            shape, x = x.shape, x.reshape(-1)
        if not x.is_floating_point():  # diffusers' x[:, None] * weight: integer steps take the weight's dtype
            plain = not (self.log or self.fold_2pi) and self.in_features is None  # (torch.log makes float32)
            x = x.to(self.weight.dtype) if plain else x.float()
        if self.log:
            x = torch.log(x)
        if self.in_features is not None:
            phase = (2 * math.pi * x) @ self.weight.to(x.dtype).T
        elif self.fold_2pi:
            phase = torch.outer(x, (2 * math.pi * self.weight).to(x.dtype))
        else:
            phase = x[:, None] * self.weight[None, :] * 2 * math.pi
        a, b = torch.sin(phase), torch.cos(phase)
        if self.first == "cos":
            a, b = b, a
        parts = (x.reshape(-1, 1).to(a.dtype), a, b) if self.include_input else (a, b)
        return torch.cat(parts, dim=-1).reshape(*shape, self.out_dim)
