"""The modules of a time path found in a checkpoint: the sinusoid (or Fourier features) its layout
describes, and its MLP with the widths, activations and biases read from the tensors."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ..conventions import Convention, resolve_convention
from .cast import InModelDtype
from .fourier import FourierEmbedding
from .mlp import TimestepMLP
from .sinusoidal_module import SinusoidalEmbedding
from .time_path import LayoutMatch

__all__ = ["time_path_modules"]


def time_path_modules(
    match: LayoutMatch,
    ours: Mapping[str, torch.Tensor],
    convention: str | Convention | None = None,
    time_proj: nn.Module | None = None,
    **acts: str | None,
) -> tuple[nn.Module, TimestepMLP]:
    """``(time_proj, time_embedding)`` for the tensors ``ours`` (our names) of a time path of ``match``.

    ``convention`` overrides the layout's sinusoid; ``time_proj`` replaces it altogether (a diffusers
    Fourier UNet, whose options live in its config); ``act`` / ``post_act`` override the layout's.
    Raises ValueError when the layout does not say which sinusoid its model uses and neither is given.
    """
    layout = match.layout
    w1, w2 = ours["time_embedding.linear_1.weight"], ours["time_embedding.linear_2.weight"]
    if w1.dim() != 2 or w2.dim() != 2 or w2.shape[1] != w1.shape[0]:
        shapes = {k: list(v.shape) for k, v in ours.items()}
        raise ValueError(f"the time MLP of this {match.describe()} is not Linear -> Linear: {shapes}")
    width = w1.shape[1]
    if time_proj is None and "time_proj.weight" in ours:
        if layout.fourier is None:
            raise ValueError(
                "this checkpoint has Fourier features (time_proj.weight) whose options live in the model's config: "
                "pass time_proj=FourierEmbedding(..) or load its folder with from_pretrained"
            )
        time_proj = _fourier(ours["time_proj.weight"], width, layout.fourier[1])
    if time_proj is None:
        conv = convention if convention is not None else layout.convention
        if conv is None:
            raise ValueError(
                f"a {layout.name} state dict does not say which sinusoid its model uses (diffusers keeps "
                "flip_sin_to_cos and freq_shift in config.json): pass family= or convention= (diffusers "
                "UNets: 'adm' by default; flip_sin_to_cos=False, freq_shift=1 is 'ddpm'), or load the folder "
                "with from_pretrained"
            )
        conv = resolve_convention(conv, scale=layout.scale if layout.scale != 1 else None)
        first = layout.in_model_dtype if layout.scale_first is None else layout.scale_first
        sinusoid = SinusoidalEmbedding(width, conv, precise=layout.precise, scale_in_input_dtype=first)
        time_proj = InModelDtype(sinusoid) if layout.in_model_dtype else sinusoid
    cond = ours.get("time_embedding.cond_proj.weight")
    mlp = TimestepMLP(
        width,
        w1.shape[0],
        out_dim=w2.shape[0],
        act=acts.get("act", layout.act),
        post_act=acts.get("post_act", layout.post_act),
        cond_dim=cond.shape[1] if cond is not None else None,
        bias="time_embedding.linear_1.bias" in ours,
    )
    return time_proj, mlp


def _fourier(weight: torch.Tensor, width: int, options: dict) -> FourierEmbedding:
    proj = FourierEmbedding(2 * weight.numel(), **options)
    if proj.out_dim != width:
        raise ValueError(f"{weight.numel()} Fourier frequencies give {proj.out_dim} features; the MLP takes {width}")
    return proj  # in the embedder's dtype once built (from_state_dict casts every part)
