"""Swap our time modules into diffusers' models, keeping the weights and the numbers (back: `export`).

Every diffusers time path is built from three modules: ``Timesteps`` (the sinusoid),
``GaussianFourierProjection`` (Fourier features) and ``TimestepEmbedding`` (the MLP), wherever a
model keeps them (``unet.time_proj``, ``transformer.time_text_embed.timestep_embedder``,
``norm1.emb`` of DiT's blocks, Flux's guidance embedder ...).
[`patch_diffusers_model`][timestep_embed.interop.patch_diffusers_model] replaces each by
[`SinusoidalEmbedding`][timestep_embed.SinusoidalEmbedding], [`FourierEmbedding`][timestep_embed.FourierEmbedding] and
[`TimestepMLP`][timestep_embed.TimestepMLP] with the module's own flags and weights, so outputs stay the same and the
state dict keeps its keys. diffusers is imported lazily, inside the functions.
"""

from __future__ import annotations

import importlib

import torch
from torch import nn

from ..conventions import Convention, convention_from_diffusers
from ..nn import FourierEmbedding, SinusoidalEmbedding, TimestepEmbedder, TimestepMLP
from ..nn.time_path import load_state_dict_checked
from ..sinusoidal import sinusoidal_embedding
from .trace import is_dit_style

__all__ = [
    "PATCHABLE",
    "SUPPORTED_UNETS",
    "require_diffusers",
    "convention_from_unet_config",
    "sinusoid_from_diffusers",
    "fourier_from_diffusers",
    "mlp_from_diffusers",
    "embedder_from_diffusers_unet",
    "patch_diffusers_model",
]

SUPPORTED_UNETS = ("UNet2DModel", "UNet2DConditionModel")  # the UNets whose time path can be exported to
# The model classes patch_diffusers_model is tested on (a tiny random config of each).
PATCHABLE = (
    "UNet1DModel",
    "UNet2DModel",
    "UNet2DConditionModel",
    "DiTTransformer2DModel",
    "PixArtTransformer2DModel",
    "SD3Transformer2DModel",
    "FluxTransformer2DModel",
    "WanTransformer3DModel",
    "HunyuanVideoTransformer3DModel",
)
_ACT_NAMES = {nn.SiLU: "silu", nn.Mish: "mish", nn.GELU: "gelu", nn.ReLU: "relu"}


def require_diffusers():
    """Import diffusers or raise an ImportError that says how to install it."""
    try:
        return importlib.import_module("diffusers")
    except ImportError as err:
        raise ImportError("timestep_embed.interop needs diffusers: pip install 'timestep-embed[diffusers]'") from err


def _check_unet(unet) -> str:
    diffusers = require_diffusers()
    for name in SUPPORTED_UNETS:
        if isinstance(unet, getattr(diffusers, name)):
            return name
    raise TypeError(f"unet must be a diffusers {' or '.join(SUPPORTED_UNETS)}, got {type(unet).__name__}")


def convention_from_unet_config(config) -> Convention:
    """The sinusoid convention of a diffusers UNet config (``flip_sin_to_cos``, ``freq_shift``).

    Defaults are the UNets' own (flip_sin_to_cos=True, freq_shift=0: the "adm" preset).
    """
    get = config.get if hasattr(config, "get") else lambda k, d: getattr(config, k, d)
    return convention_from_diffusers(
        flip_sin_to_cos=bool(get("flip_sin_to_cos", True)), downscale_freq_shift=float(get("freq_shift", 0))
    )


def sinusoid_from_diffusers(module, num_timesteps: int | None = None) -> SinusoidalEmbedding:
    """Our [`SinusoidalEmbedding`][timestep_embed.SinusoidalEmbedding] for a diffusers ``Timesteps`` module (the same
    numbers; with ``num_timesteps``, an integer-step cache of that size)."""
    max_period = getattr(module, "time_theta", 10000)  # BRIA's BriaTimesteps: the max period configurable
    conv = convention_from_diffusers(module.flip_sin_to_cos, module.downscale_freq_shift, module.scale, max_period)
    return SinusoidalEmbedding(module.num_channels, conv, num_timesteps=num_timesteps)


def fourier_from_diffusers(module, learnable: bool = False) -> FourierEmbedding:
    """Our [`FourierEmbedding`][timestep_embed.FourierEmbedding] for a ``GaussianFourierProjection``: the same weight in
    the same dtype and device (a bfloat16 model forms the phase ``x * weight * 2 pi`` in bfloat16, as diffusers); a
    buffer, or a Parameter with ``learnable`` (diffusers keeps a Parameter that does not require a gradient)."""
    weight = module.weight.detach()
    first = "cos" if module.flip_sin_to_cos else "sin"
    ours = FourierEmbedding(2 * weight.numel(), first=first, log=module.log, learnable=learnable)
    ours = ours.to(device=weight.device, dtype=weight.dtype)  # load_state_dict copies into the buffer's dtype
    load_state_dict_checked(ours, {"weight": weight}, "GaussianFourierProjection -> FourierEmbedding")
    return ours


def _act_name(module, argument: str) -> str | None:
    if module is None:
        return None
    if type(module) not in _ACT_NAMES or getattr(module, "approximate", "none") != "none":
        raise ValueError(f"{argument}: unsupported activation {module!r}; supported: {sorted(_ACT_NAMES.values())}")
    return _ACT_NAMES[type(module)]


def mlp_from_diffusers(module) -> TimestepMLP:
    """Our [`TimestepMLP`][timestep_embed.TimestepMLP] for a diffusers ``TimestepEmbedding``, weights loaded
    strictly."""
    l1, l2, cond = module.linear_1, module.linear_2, module.cond_proj
    ours = TimestepMLP(
        l1.in_features,
        l1.out_features,
        out_dim=l2.out_features,
        act=_act_name(module.act, "act"),
        post_act=_act_name(module.post_act, "post_act"),
        cond_dim=cond.in_features if cond is not None else None,
        bias=l1.bias is not None,
    )
    load_state_dict_checked(ours, module.state_dict(), "diffusers TimestepEmbedding -> TimestepMLP")
    return ours.to(device=l1.weight.device, dtype=l1.weight.dtype)


_THETA_TIMESTEPS = ("BriaTimesteps", "BriaFiboTimesteps")  # diffusers' Timesteps with time_theta as max period


def _dit_sinusoid(t: torch.Tensor, dim: int, max_period: float = 10000) -> torch.Tensor:
    """DiT's ``TimestepEmbedder.timestep_embedding`` (``[cos | sin]``, shift 0, float32) by our core."""
    return sinusoidal_embedding(t.float(), dim, "adm", max_period=max_period)


def _adopt(new: nn.Module, old: nn.Module) -> nn.Module:
    """``new`` with ``old``'s own ``nn.Linear`` layers (its MLP) or parameter (Fourier features), not copies, and
    its train/eval mode: ``requires_grad``, an optimizer built before the patch, hooks on those layers and the
    parameters' list all stay as they were. ``new``'s names are ``old``'s (the state-dict keys)."""
    for name, child in old.named_children():
        if isinstance(child, nn.Linear):
            setattr(new, name, child)
    for name, param in old.named_parameters(recurse=False):
        if hasattr(new, name):  # the same names: new was loaded strictly from old's state dict
            setattr(new, name, param)
    return new.train(old.training)


def _replacement(module, emb, num_timesteps: int | None) -> nn.Module | None:
    """Our module for one diffusers time-path module (``emb``: ``diffusers.models.embeddings``), or None."""
    if isinstance(module, emb.Timesteps) or type(module).__name__ in _THETA_TIMESTEPS:
        return sinusoid_from_diffusers(module, num_timesteps).train(module.training)
    if isinstance(module, emb.GaussianFourierProjection):
        return _adopt(fourier_from_diffusers(module, learnable=True), module)
    if isinstance(module, emb.TimestepEmbedding):
        return _adopt(mlp_from_diffusers(module), module)
    return None


def patch_diffusers_model(model, num_timesteps: int | None = None):
    """Replace every diffusers time-path module inside ``model`` by ours, in place; returns ``model``.

    ``Timesteps`` -> [`SinusoidalEmbedding`][timestep_embed.SinusoidalEmbedding] (its flags),
    ``GaussianFourierProjection`` -> [`FourierEmbedding`][timestep_embed.FourierEmbedding] (its weight),
    ``TimestepEmbedding`` -> [`TimestepMLP`][timestep_embed.TimestepMLP] (its ``nn.Linear`` layers themselves), the
    static sinusoid of a DiT-style ``TimestepEmbedder`` (Z-Image) -> ours. The outputs stay the same for integer,
    fractional, batched and scalar timesteps (and per-token ones where the model takes them); the state-dict keys,
    the parameters (the same objects: ``requires_grad``, an optimizer's state) and the train/eval mode do not
    change, so ``save_pretrained`` still writes a checkpoint that an unpatched model loads. SkyReels-V2's
    ``SkyReelsV2Timesteps`` stays: its float64 sinusoid forms the frequencies as ``1 / 10000 ** (k / h)``, which
    rounds other than the core's ``exp`` in some last bits. Every replacement is built before the first is made: a
    model the patch refuses is left as it was.

    Args:
        model: a diffusers model (``ModelMixin``): the classes of `PATCHABLE` and those the
            coverage report (``scripts/diffusers_coverage.py``) checks; others are refused.
        num_timesteps: the size of the sinusoids' integer-step cache (UNets: default
            ``config.num_train_timesteps``; transformers, fed float timesteps: no cache).
    """
    diffusers = require_diffusers()
    if not isinstance(model, diffusers.ModelMixin):
        raise TypeError(
            f"patch_diffusers_model: {type(model).__name__} is not a diffusers model (tested on "
            f"{', '.join(PATCHABLE)} and the classes of scripts/diffusers_coverage.py)"
        )
    kind = type(model).__name__
    emb = diffusers.models.embeddings
    if num_timesteps is None and "UNet" in kind:
        num_timesteps = model.config.get("num_train_timesteps") or 1000
    swaps, dits = [], []
    for name, module in list(model.named_modules()):
        new = _replacement(module, emb, num_timesteps)
        if new is not None:
            swaps.append((name, new))  # the model's own layers, where the model keeps them
        elif is_dit_style(module) and not getattr(module, "_timestep_embed_patched", False):
            dits.append(module)
    if not swaps and not dits:
        raise ValueError(f"patch_diffusers_model: this {kind} holds no diffusers time-path module (patched already?)")
    for name, new in swaps:
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, new)
    for module in dits:
        # DiT's TimestepEmbedder as Z-Image copies it: its static sinusoid gives way to ours (the mlp stays, its
        # keys are the checkpoint's)
        module.timestep_embedding = _dit_sinusoid
        module._timestep_embed_patched = True
    return model


def embedder_from_diffusers_unet(unet, num_timesteps: int | None = None) -> TimestepEmbedder:
    """A standalone [`TimestepEmbedder`][timestep_embed.TimestepEmbedder] carrying a diffusers UNet's time path and
    weights."""
    kind = _check_unet(unet)
    emb = require_diffusers().models.embeddings
    proj = unet.time_proj
    if isinstance(proj, emb.Timesteps):
        T = num_timesteps or unet.config.get("num_train_timesteps") or 1000
        new_proj: nn.Module = sinusoid_from_diffusers(proj, T)
    elif isinstance(proj, emb.GaussianFourierProjection):
        new_proj = fourier_from_diffusers(proj)
    else:
        raise TypeError(f"{kind}.time_proj is a {type(proj).__name__}; a sinusoid or Fourier features are needed")
    mlp = mlp_from_diffusers(unet.time_embedding)
    embedder = TimestepEmbedder(mlp.linear_2.out_features, mlp.linear_1.in_features, time_proj=new_proj.to(unet.device))
    embedder.time_embedding = mlp  # the UNet's own MLP: its activations and weights
    return embedder
