"""The MLP that projects the sinusoid to the model's embedding width, laid out as diffusers'
``TimestepEmbedding`` (same child names, so state dicts load as they are)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["TimestepMLP", "ACTIVATIONS"]

ACTIVATIONS = {"silu": nn.SiLU, "swish": nn.SiLU, "gelu": nn.GELU, "mish": nn.Mish, "relu": nn.ReLU}


def _activation(name, argument: str) -> nn.Module | None:
    if name is None:
        return None
    if name not in ACTIVATIONS:
        raise ValueError(f"{argument} must be one of {sorted(ACTIVATIONS)} or None, got {name!r}")
    return ACTIVATIONS[name]()


class TimestepMLP(nn.Module):
    """``Linear -> act -> Linear [-> post_act]``: ``[..., in_dim] -> [..., out_dim or hidden_dim]``.

    Same children and state-dict keys as diffusers ``TimestepEmbedding`` (``linear_1``, ``act``,
    ``linear_2``, optional bias-free ``cond_proj``, optional ``post_act``), so its weights load with
    ``strict=True`` in both directions and the outputs match.

    Args:
        in_dim: width of the sinusoid / Fourier features.
        hidden_dim: width after ``linear_1`` (diffusers' ``time_embed_dim``).
        out_dim: width after ``linear_2``; default ``hidden_dim``.
        act: ``"silu"`` (default), ``"gelu"``, ``"mish"``, ``"relu"`` or None.
        post_act: an activation after ``linear_2`` (same names; default None).
        cond_dim: width of an extra condition added to the input through ``cond_proj``.
        bias: biases of the two Linear layers (diffusers' ``sample_proj_bias``).
    """

    def __init__(
        self,
        in_dim: int,
        hidden_dim: int,
        out_dim: int | None = None,
        act: str | None = "silu",
        post_act: str | None = None,
        cond_dim: int | None = None,
        bias: bool = True,
    ):
        super().__init__()
        for name, value in (
            ("in_dim", in_dim),
            ("hidden_dim", hidden_dim),
            ("out_dim", out_dim),
            ("cond_dim", cond_dim),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.linear_1 = nn.Linear(in_dim, hidden_dim, bias)
        self.cond_proj = nn.Linear(cond_dim, in_dim, bias=False) if cond_dim is not None else None
        self.act = _activation(act, "act")
        self.linear_2 = nn.Linear(hidden_dim, out_dim if out_dim is not None else hidden_dim, bias)
        self.post_act = _activation(post_act, "post_act")

    def forward(self, sample: torch.Tensor, condition: torch.Tensor | None = None) -> torch.Tensor:
        """``sample`` ``[..., in_dim]``, optional ``condition`` ``[..., cond_dim]`` -> ``[..., out]``."""
        if condition is not None:
            if self.cond_proj is None:
                raise ValueError("a condition was given but this TimestepMLP has no cond_proj (cond_dim=None)")
            sample = sample + self.cond_proj(condition)
        sample = self.linear_1(sample)
        if self.act is not None:
            sample = self.act(sample)
        sample = self.linear_2(sample)
        return self.post_act(sample) if self.post_act is not None else sample
