"""Weight mapping: checkpoint key layouts of the time-embedding MLP -> our names, strict loading.

No diffusers import here: the key layouts are plain strings. Our names are diffusers' names
(``time_embedding.linear_1.weight`` ...), so a diffusers state dict needs no renaming.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

__all__ = ["KEY_LAYOUTS", "load_state_dict_checked", "embedder_state_dict", "to_layout"]

# checkpoint prefix -> our prefix, per codebase. Only the MLP (and Fourier weights) carry state.
KEY_LAYOUTS: dict[str, dict[str, str]] = {
    # diffusers UNet2DModel / UNet2DConditionModel: our names are theirs.
    "diffusers": {"time_embedding.": "time_embedding.", "time_proj.": "time_proj."},
    # improved-/guided-diffusion and ldm/Stable Diffusion (original checkpoints):
    # time_embed = nn.Sequential(linear, SiLU, linear).
    "adm": {"time_embed.0.": "time_embedding.linear_1.", "time_embed.2.": "time_embedding.linear_2."},
    # DiT: t_embedder.mlp = nn.Sequential(Linear, SiLU, Linear).
    "dit": {"t_embedder.mlp.0.": "time_embedding.linear_1.", "t_embedder.mlp.2.": "time_embedding.linear_2."},
    # EDM DhariwalUNet: silu(map_layer0(emb)) -> map_layer1 -> (labels) -> silu, i.e. post_act="silu".
    "edm": {"map_layer0.": "time_embedding.linear_1.", "map_layer1.": "time_embedding.linear_2."},
}


def _describe(state: Mapping[str, torch.Tensor]) -> str:
    return ", ".join(f"{k} {list(v.shape)}" for k, v in state.items()) or "(no tensors)"


def load_state_dict_checked(module: nn.Module, state_dict: Mapping[str, torch.Tensor], what: str) -> None:
    """``module.load_state_dict(state_dict, strict=True)`` with an error that names the problem.

    Raises:
        ValueError: listing missing keys, unexpected keys, shape mismatches and the expected
            layout (every key of ``module.state_dict()`` with its shape).
    """
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    shapes = [
        f"{k}: expected {list(expected[k].shape)}, got {list(state_dict[k].shape)}"
        for k in expected
        if k in state_dict and expected[k].shape != state_dict[k].shape
    ]
    if missing or unexpected or shapes:
        raise ValueError(
            f"{what}: the state dict does not fit. missing keys: {missing}; unexpected keys: "
            f"{unexpected}; shape mismatches: {shapes or 'none'}. Expected layout: "
            f"{_describe(expected)}"
        )
    module.load_state_dict(state_dict, strict=True)


def _guess_layout(state_dict: Mapping[str, torch.Tensor]) -> str:
    for name, mapping in KEY_LAYOUTS.items():
        first_prefix = next(iter(mapping))
        if any(k.startswith(first_prefix) for k in state_dict):
            return name
    raise ValueError(
        "could not tell the checkpoint layout: no key starts with any of "
        f"{[next(iter(m)) for m in KEY_LAYOUTS.values()]}; pass layout= one of {sorted(KEY_LAYOUTS)}"
    )


def embedder_state_dict(state_dict: Mapping[str, torch.Tensor], layout: str = "auto") -> dict[str, torch.Tensor]:
    """The time-embedding part of a whole-model checkpoint, renamed for :class:`TimestepEmbedder`.

    Args:
        state_dict: a full UNet/DiT state dict (other keys are ignored).
        layout: one of :data:`KEY_LAYOUTS` or ``"auto"`` (guessed from the keys).

    Returns:
        ``{"time_embedding.linear_1.weight": ..., ...}`` (plus ``time_proj.weight`` for Fourier
        features in diffusers checkpoints), ready for ``TimestepEmbedder.load_state_dict``.
    """
    if layout == "auto":
        layout = _guess_layout(state_dict)
    if layout not in KEY_LAYOUTS:
        raise ValueError(f"layout must be 'auto' or one of {sorted(KEY_LAYOUTS)}, got {layout!r}")
    out = _renamed(state_dict, KEY_LAYOUTS[layout])
    if not out:
        raise ValueError(f"no key of the state dict starts with {list(KEY_LAYOUTS[layout])} (layout {layout!r})")
    return out


def to_layout(state_dict: Mapping[str, torch.Tensor], layout: str) -> dict[str, torch.Tensor]:
    """The reverse of :func:`embedder_state_dict`: our embedder's keys renamed into ``layout``."""
    if layout not in KEY_LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(KEY_LAYOUTS)}, got {layout!r}")
    return _renamed(state_dict, {ours: theirs for theirs, ours in KEY_LAYOUTS[layout].items()})


def _renamed(state_dict: Mapping[str, torch.Tensor], prefixes: Mapping[str, str]) -> dict[str, torch.Tensor]:
    """The entries whose key starts with a prefix in ``prefixes``, that prefix replaced by its value."""
    out = {}
    for key, value in state_dict.items():
        for old, new in prefixes.items():
            if key.startswith(old):
                out[new + key[len(old) :]] = value
    return out
