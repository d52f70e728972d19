"""The MLP that projects the sinusoid to the UNet's embedding width, laid out as diffusers'
``TimestepEmbedding`` (same child names, so state dicts load as they are)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import module as _torch_module

__all__ = ["TimestepMLP", "call_children_directly"]


def call_children_directly(*modules) -> bool:
    """True when no hook is registered on ``modules`` nor globally.

    Then ``m.forward(x)`` does exactly what ``m(x)`` does minus ``Module.__call__``'s bookkeeping
    (~2-4 us a call, the bulk of a batch-1 time embedding); with any hook we call ``m(x)``.
    """
    g = _torch_module
    if g._global_forward_hooks or g._global_forward_pre_hooks or g._global_backward_hooks:
        return False
    if g._global_backward_pre_hooks:
        return False
    for m in modules:
        if m is not None and (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks):
            return False
    return True


_ACTIVATIONS = {"silu": nn.SiLU, "swish": nn.SiLU, "gelu": nn.GELU, "mish": nn.Mish, "relu": nn.ReLU}


def _activation(name, argument: str) -> nn.Module | None:
    if name is None:
        return None
    if name not in _ACTIVATIONS:
        raise ValueError(f"{argument} must be one of {sorted(_ACTIVATIONS)} or None, got {name!r}")
    return _ACTIVATIONS[name]()


class TimestepMLP(nn.Module):
    """``Linear -> act -> Linear [-> post_act]``: ``[..., in_dim] -> [..., out_dim or hidden_dim]``.

    Same children and state-dict keys as diffusers ``TimestepEmbedding`` (``linear_1``,
    ``act``, ``linear_2``, optional ``cond_proj`` without bias, optional ``post_act``), so its
    weights load with ``strict=True`` in both directions and the outputs match.

    Args:
        in_dim: width of the sinusoid / Fourier features.
        hidden_dim: width after ``linear_1`` (diffusers' ``time_embed_dim``).
        out_dim: width after ``linear_2``; default ``hidden_dim``.
        act, post_act: ``"silu"`` (default), ``"gelu"``, ``"mish"``, ``"relu"``; post_act None.
        cond_dim: width of an extra condition added to the input through ``cond_proj``.
        bias: biases of the two Linear layers (diffusers' ``sample_proj_bias``).
    """

    def __init__(
        self,
        in_dim: int,
        hidden_dim: int,
        out_dim: int | None = None,
        act: str = "silu",
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
        layers = (self.linear_1, self.act, self.linear_2, self.post_act)
        direct = call_children_directly(*layers)
        for layer in layers:
            if layer is not None:
                sample = layer.forward(sample) if direct else layer(sample)
        return sample
