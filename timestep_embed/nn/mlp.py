"""The MLP that projects the sinusoid to the model's embedding width, laid out as diffusers'
``TimestepEmbedding`` (same child names, so state dicts load as they are)."""

from __future__ import annotations

import torch
from torch import nn

from ..checks import check_bool, check_choice, check_int, check_tensor

__all__ = ["TimestepMLP", "ACTIVATIONS"]

ACTIVATIONS = {"silu": nn.SiLU, "swish": nn.SiLU, "gelu": nn.GELU, "mish": nn.Mish, "relu": nn.ReLU}


def _activation(name, argument: str) -> nn.Module | None:
    if name is None:
        return None
    return ACTIVATIONS[check_choice(name, argument, ACTIVATIONS)]()


def _in_dtype_of(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x`` in ``weight``'s dtype (Tensor.to costs microseconds even as a no-op: only when they differ). Float8
    weights are storage: a hook upcasts them to the dtype it computes in (diffusers' enable_layerwise_casting), so
    ``x`` stays as it came, as there."""
    return x.to(weight.dtype) if x.dtype != weight.dtype and weight.dtype.itemsize > 1 else x


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
        check_int(in_dim, "in_dim"), check_int(hidden_dim, "hidden_dim")
        for name, value in (("out_dim", out_dim), ("cond_dim", cond_dim)):
            if value is not None:
                check_int(value, name)
        bias = check_bool(bias, "bias")
        self.linear_1 = nn.Linear(in_dim, hidden_dim, bias)
        self.cond_proj = nn.Linear(cond_dim, in_dim, bias=False) if cond_dim is not None else None
        self.act = _activation(act, "act")
        self.linear_2 = nn.Linear(hidden_dim, out_dim if out_dim is not None else hidden_dim, bias)
        self.post_act = _activation(post_act, "post_act")

    def forward(self, sample: torch.Tensor, condition: torch.Tensor | None = None) -> torch.Tensor:
        """``sample`` ``[..., in_dim]``, optional ``condition`` ``[..., cond_dim]`` -> ``[..., out]``.

        Both are floating tensors on the weights' device, cast to the weights' dtype (a float32
        sinusoid feeds a bfloat16 MLP as it is; float8 weights, upcast by a hook, take them as they come);
        ``condition``'s leading dims broadcast with ``sample``'s.
        """
        weight = self.linear_1.weight
        sample = check_tensor(
            sample, "sample", device=weight.device, width=self.linear_1.in_features, width_name="in_dim"
        )
        sample = _in_dtype_of(sample, weight)
        if condition is not None:
            if self.cond_proj is None:
                raise ValueError("a condition was given but this TimestepMLP has no cond_proj (cond_dim=None)")
            width = self.cond_proj.in_features
            condition = check_tensor(condition, "condition", device=weight.device, width=width, width_name="cond_dim")
            try:
                torch.broadcast_shapes(sample.shape[:-1], condition.shape[:-1])
            except RuntimeError:
                raise ValueError(
                    f"condition {tuple(condition.shape)} and sample {tuple(sample.shape)} must agree in their "
                    "leading (batch) dims, or broadcast"
                ) from None
            sample = sample + self.cond_proj(_in_dtype_of(condition, weight))
        sample = self.linear_1(sample)
        if self.act is not None:
            sample = self.act(sample)
        sample = self.linear_2(sample)
        return self.post_act(sample) if self.post_act is not None else sample
