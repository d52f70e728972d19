"""The embedder a model owns: ``t -> time_input -> time_proj (sinusoid) -> time_embedding (MLP) -> emb``.

The child names (``time_proj``, ``time_embedding``; inside the MLP ``linear_1``, ``act``,
``linear_2``, ``cond_proj``, ``post_act``) are diffusers' UNet attribute names, so diffusers
weights load as they are. Compute ``emb`` once per forward and hand it to every block.
"""

from __future__ import annotations

import torch
from torch import nn

from ..conventions import Convention
from ..guards import TimestepsLike
from .mlp import TimestepMLP
from .sinusoidal import SinusoidalEmbedding
from .time_input import check_time_input, time_input

__all__ = ["TimestepEmbedder", "default_sinusoid_dim"]


def default_sinusoid_dim(emb_dim: int) -> int:
    """``emb_dim // 4`` rounded down to even, at least 4 (diffusers / ADM: 1280 -> 320)."""
    return max(4, 2 * (emb_dim // 8))


class TimestepEmbedder(nn.Module):
    """``t [B] (or [...]) -> emb [B, emb_dim] (or [..., emb_dim])``: time input, sinusoid, MLP.

    Children: ``time_proj`` (a :class:`SinusoidalEmbedding`, or the module given as ``time_proj``,
    e.g. a :class:`FourierEmbedding`) and ``time_embedding`` (:class:`TimestepMLP`
    ``sinusoid_dim -> emb_dim -> emb_dim``).

    Args:
        emb_dim: output width (diffusers' ``time_embed_dim``, 4x the first channel count).
        sinusoid_dim: width of the sinusoid; default :func:`default_sinusoid_dim`.
        convention: sinusoid convention (preset or :class:`Convention`), default ``"adm"``.
        time_input: what the sinusoid is fed, see :func:`time_input` (default ``"identity"``).
        num_timesteps: T; with ``time_input="identity"`` also the size of the integer-step cache.
        act: the MLP's activation (see :class:`TimestepMLP`).
        post_act: an activation after the MLP (EDM's DhariwalUNet has one).
        cond_dim: width of an extra condition added before the MLP (diffusers' ``cond_proj``).
        precise: float64 sinusoid (see the core).
        time_proj: a module ``[...] -> [..., sinusoid_dim]`` used instead of the sinusoid.
    """

    def __init__(
        self,
        emb_dim: int,
        sinusoid_dim: int | None = None,
        convention: str | Convention = "adm",
        *,
        time_input: str = "identity",
        num_timesteps: int = 1000,
        act: str = "silu",
        post_act: str | None = None,
        cond_dim: int | None = None,
        precise: bool = False,
        time_proj: nn.Module | None = None,
    ):
        super().__init__()
        check_time_input(time_input, num_timesteps)
        if isinstance(emb_dim, bool) or not isinstance(emb_dim, int) or emb_dim < 1:
            raise ValueError(f"emb_dim must be a positive int, got {emb_dim!r}")
        if time_proj is not None:
            sinusoid_dim = getattr(time_proj, "dim", sinusoid_dim)
        sinusoid_dim = default_sinusoid_dim(emb_dim) if sinusoid_dim is None else sinusoid_dim
        self.time_input, self.num_timesteps = time_input, num_timesteps
        if time_proj is None:
            cache = num_timesteps if time_input == "identity" else None
            time_proj = SinusoidalEmbedding(sinusoid_dim, convention, precise=precise, num_timesteps=cache)
        self.time_proj = time_proj
        self.time_embedding = TimestepMLP(sinusoid_dim, emb_dim, act=act, post_act=post_act, cond_dim=cond_dim)

    @property
    def emb_dim(self) -> int:
        return self.time_embedding.linear_2.out_features

    def forward(self, t: TimestepsLike, condition: torch.Tensor | None = None) -> torch.Tensor:
        """``t`` ``[...]`` (int or float) -> ``[..., emb_dim]`` in the MLP's dtype."""
        features = self.time_proj(time_input(t, self.time_input, self.num_timesteps))
        weight = self.time_embedding.linear_1.weight
        return self.time_embedding(features.to(weight.dtype), condition)
