"""The timestep cast to the model's dtype before the sinusoid, as Flux does it; the dtype a ported module runs in."""

from __future__ import annotations

import torch
from torch import nn

from ..guards import TimestepsLike, as_tensor

__all__ = ["InModelDtype", "run_dtype"]


def run_dtype(*stored: torch.dtype) -> torch.dtype:
    """The dtype a module built from a checkpoint's weights runs in: the stored one (of several, the widest, which
    holds the others' values: a float32 layer beside float16 ones), but bfloat16 for a float8 checkpoint (torch has
    no float8 arithmetic; bfloat16 holds every float8 value exactly)."""
    widest = max(stored, key=lambda dtype: dtype.itemsize)  # the first of equal widths
    return torch.bfloat16 if widest.is_floating_point and widest.itemsize == 1 else widest


class InModelDtype(nn.Module):
    """``t -> inner(t.to(model dtype))``: what a bfloat16 Flux does to its timestep.

    diffusers' Flux forms ``timestep.to(hidden_states.dtype) * 1000``
    (``models/transformers/transformer_flux.py``); the original builds ``t_vec`` in the image's dtype
    and multiplies by ``time_factor=1000`` in that dtype (black-forest-labs/flux ``src/flux/sampling.py``,
    ``src/flux/modules/layers.py``). Wrap a ``SinusoidalEmbedding(..., scale=1000,
    scale_in_input_dtype=True)`` to get those numbers: in bfloat16, sigma 0.99 reaches the sinusoid
    as 988.

    The model's dtype is that of a zero-size buffer that follows ``.to()`` / ``.half()`` /
    ``.bfloat16()`` and is not in the state dict, so the state dict stays ``inner``'s.
    """

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.anchor: torch.Tensor
        self.register_buffer("anchor", torch.empty(0), persistent=False)
        self.dim = getattr(inner, "dim", None)
        self.out_dim = getattr(inner, "out_dim", self.dim)

    def forward(self, t: TimestepsLike) -> torch.Tensor:
        """``t`` ``[...]`` -> ``inner(t cast to the module's dtype)``."""
        return self.inner(as_tensor(t, self.anchor.device).to(self.anchor.dtype))
