"""The time path of real checkpoints: their key layouts, the prefixes they sit under, strict loading.

No diffusers import: the layouts are plain strings. Our names are diffusers' names
(``time_embedding.linear_1.weight`` ...), so a diffusers state dict needs no renaming.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

__all__ = [
    "KEY_LAYOUTS",
    "KNOWN_PREFIXES",
    "LAYOUT_DEFAULTS",
    "LAYOUT_PROBES",
    "load_state_dict_checked",
    "find_time_mlp",
    "embedder_state_dict",
    "to_layout",
]

# checkpoint key prefix -> our key prefix, per codebase. Only the MLP (and Fourier weights) carry state.
KEY_LAYOUTS: dict[str, dict[str, str]] = {
    # diffusers UNet2DModel / UNet2DConditionModel: our names are theirs.
    "diffusers": {"time_embedding.": "time_embedding.", "time_proj.": "time_proj."},
    # improved-/guided-diffusion and ldm / Stable Diffusion (original checkpoints):
    # time_embed = nn.Sequential(linear(ch, 4 ch), SiLU(), linear(4 ch, 4 ch)).
    "adm": {"time_embed.0.": "time_embedding.linear_1.", "time_embed.2.": "time_embedding.linear_2."},
    # DiT models.py TimestepEmbedder: mlp = nn.Sequential(Linear(256, hidden), SiLU(), Linear(hidden, hidden)).
    "dit": {"t_embedder.mlp.0.": "time_embedding.linear_1.", "t_embedder.mlp.2.": "time_embedding.linear_2."},
    # EDM training/networks.py DhariwalUNet: silu(map_layer0(emb)) -> map_layer1 -> (+ labels) -> silu.
    "edm": {"map_layer0.": "time_embedding.linear_1.", "map_layer1.": "time_embedding.linear_2."},
}
# The key that marks each layout: its first Linear's weight.
LAYOUT_PROBES = {
    "diffusers": "time_embedding.linear_1.weight",
    "adm": "time_embed.0.weight",
    "dit": "t_embedder.mlp.0.weight",
    "edm": "map_layer0.weight",
}
# Where whole-model checkpoints keep the network: original Stable Diffusion / LDM, pipelines' unet
# dumps, EDM's EDMPrecond (the net as `model`), and no prefix at all.
KNOWN_PREFIXES = ("", "model.diffusion_model.", "unet.", "model.")
# What a layout says about the rest of the time path (None: the layout does not say).
LAYOUT_DEFAULTS: dict[str, dict] = {
    "diffusers": {"convention": None},  # flip_sin_to_cos / freq_shift live in the UNet config, not the weights
    "adm": {"convention": "adm"},  # nn.timestep_embedding: [cos | sin], shift 0
    "dit": {"convention": "adm"},  # TimestepEmbedder.timestep_embedding: [cos | sin], shift 0
    "edm": {"convention": "edm", "post_act": "silu"},  # PositionalEmbedding(endpoint=False); silu after map_layer1
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
            f"{unexpected}; shape mismatches: {shapes or 'none'}. Expected layout: {_describe(expected)}"
        )
    module.load_state_dict(state_dict, strict=True)


def find_time_mlp(state_dict: Mapping[str, torch.Tensor], layout: str = "auto", prefix: str | None = None):
    """``(layout, prefix)`` of the time MLP in a whole-model state dict.

    Looks for the first Linear of each layout (``time_embed.0.weight``, ``t_embedder.mlp.0.weight``,
    ...) under the :data:`KNOWN_PREFIXES` (or ``prefix`` when given). Raises ValueError naming what
    it found when nothing, or more than one thing, fits.
    """
    if layout != "auto" and layout not in KEY_LAYOUTS:
        raise ValueError(f"layout must be 'auto' or one of {sorted(KEY_LAYOUTS)}, got {layout!r}")
    prefixes = KNOWN_PREFIXES if prefix is None else (prefix,)
    layouts = list(KEY_LAYOUTS) if layout == "auto" else [layout]
    found: list[tuple[str, str]] = []
    elsewhere: list[tuple[str, str]] = []
    for name in layouts:
        first = LAYOUT_PROBES[name]
        for key in state_dict:
            if key.endswith(first):
                where = key[: -len(first)]
                (found if where in prefixes else elsewhere).append((name, where))
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise ValueError(f"several time MLPs fit: {found} (layout, prefix); pass layout= and prefix=")
    hint = f"; found {elsewhere} (layout, prefix): pass prefix=" if elsewhere else ""
    firsts = [LAYOUT_PROBES[n] for n in layouts]
    raise ValueError(f"no time MLP in this state dict: no key is one of {firsts} under the prefixes {prefixes}{hint}")


def embedder_state_dict(
    state_dict: Mapping[str, torch.Tensor], layout: str = "auto", prefix: str | None = None
) -> dict[str, torch.Tensor]:
    """The time-path part of a whole-model checkpoint, renamed for :class:`TimestepEmbedder`.

    Args:
        state_dict: a full UNet/DiT/EDM state dict (other keys are ignored).
        layout: one of :data:`KEY_LAYOUTS`, or ``"auto"`` (found from the keys).
        prefix: what the network's keys start with (``"model.diffusion_model."`` in original Stable
            Diffusion checkpoints); None tries :data:`KNOWN_PREFIXES`.

    Returns:
        ``{"time_embedding.linear_1.weight": ..., ...}`` (plus ``time_proj.weight`` for Fourier
        features in diffusers checkpoints), ready for ``TimestepEmbedder.load_state_dict``.
    """
    layout, prefix = find_time_mlp(state_dict, layout, prefix)
    return _renamed(state_dict, {prefix + old: new for old, new in KEY_LAYOUTS[layout].items()})


def to_layout(state_dict: Mapping[str, torch.Tensor], layout: str, prefix: str = "") -> dict[str, torch.Tensor]:
    """The reverse of :func:`embedder_state_dict`: our embedder's keys renamed into ``layout``."""
    if layout not in KEY_LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(KEY_LAYOUTS)}, got {layout!r}")
    return _renamed(state_dict, {ours: prefix + theirs for theirs, ours in KEY_LAYOUTS[layout].items()})


def _renamed(state_dict: Mapping[str, torch.Tensor], prefixes: Mapping[str, str]) -> dict[str, torch.Tensor]:
    """The entries whose key starts with a prefix in ``prefixes``, that prefix replaced by its value."""
    out = {}
    for key, value in state_dict.items():
        for old, new in prefixes.items():
            if key.startswith(old):
                out[new + key[len(old) :]] = value
    return out
