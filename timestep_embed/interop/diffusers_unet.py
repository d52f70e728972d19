"""Swap our time modules into diffusers' UNets and back, keeping the weights and the numbers.

diffusers' UNets compute ``emb = self.time_embedding(self.time_proj(t), timestep_cond)``. We
replace ``time_proj`` (``Timesteps`` / ``GaussianFourierProjection``) by
:class:`SinusoidalEmbedding` / :class:`FourierEmbedding` and ``time_embedding``
(``TimestepEmbedding``) by :class:`TimestepMLP`; the keys of the state dict do not change.
diffusers is imported lazily, inside the functions.
"""

from __future__ import annotations

import importlib

from torch import nn

from ..conventions import Convention, convention_from_diffusers, convention_to_diffusers
from ..nn import FourierEmbedding, SinusoidalEmbedding, TimestepEmbedder, TimestepMLP
from ..nn.checkpoints import load_state_dict_checked

__all__ = [
    "SUPPORTED_UNETS",
    "require_diffusers",
    "convention_from_unet_config",
    "sinusoid_from_diffusers",
    "fourier_from_diffusers",
    "mlp_from_diffusers",
    "embedder_from_diffusers_unet",
    "patch_diffusers_unet",
    "to_diffusers_modules",
    "export_to_diffusers",
]

SUPPORTED_UNETS = ("UNet2DModel", "UNet2DConditionModel")
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
    """Our :class:`SinusoidalEmbedding` for a diffusers ``Timesteps`` module (same numbers)."""
    conv = convention_from_diffusers(module.flip_sin_to_cos, module.downscale_freq_shift, module.scale)
    return SinusoidalEmbedding(module.num_channels, conv, num_timesteps=num_timesteps)


def fourier_from_diffusers(module) -> FourierEmbedding:
    """Our :class:`FourierEmbedding` for a ``GaussianFourierProjection``, same weight."""
    weight = module.weight.detach()
    ours = FourierEmbedding(2 * weight.numel(), first="cos" if module.flip_sin_to_cos else "sin", log=module.log)
    load_state_dict_checked(ours, {"weight": weight}, "GaussianFourierProjection -> FourierEmbedding")
    return ours.to(weight.device)


def _act_name(module, argument: str) -> str | None:
    if module is None:
        return None
    if type(module) not in _ACT_NAMES or getattr(module, "approximate", "none") != "none":
        raise ValueError(f"{argument}: unsupported activation {module!r}; supported: {sorted(_ACT_NAMES.values())}")
    return _ACT_NAMES[type(module)]


def mlp_from_diffusers(module) -> TimestepMLP:
    """Our :class:`TimestepMLP` for a diffusers ``TimestepEmbedding``, weights loaded strictly."""
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


def _time_modules(unet, num_timesteps: int | None):
    """(time_proj, time_embedding) of ours for a supported diffusers UNet, from its config."""
    kind = _check_unet(unet)
    diffusers = require_diffusers()
    config, proj = unet.config, unet.time_proj
    embedding_type = config.get("time_embedding_type", "positional")
    if embedding_type == "positional":
        if not isinstance(proj, diffusers.models.embeddings.Timesteps):
            raise TypeError(
                f"unet.time_proj is {type(proj).__name__}, expected diffusers Timesteps "
                "(was this UNet patched already?)"
            )
        conv = convention_from_unet_config(config)
        module_conv = convention_from_diffusers(proj.flip_sin_to_cos, proj.downscale_freq_shift, proj.scale)
        if conv != module_conv:
            raise ValueError(
                f"unet.config (flip_sin_to_cos, freq_shift) gives {conv} but unet.time_proj "
                f"computes {module_conv}; refusing to guess which one the weights expect"
            )
        T = num_timesteps or config.get("num_train_timesteps") or 1000
        new_proj: nn.Module = SinusoidalEmbedding(proj.num_channels, conv, num_timesteps=T)
    elif embedding_type == "fourier":
        # UNet2DModel builds GaussianFourierProjection(scale=16) with its defaults: log=True, sin first
        # (config.flip_sin_to_cos is not passed on); UNet2DConditionModel: log=False and the config's flip.
        log, flip = (True, False) if kind == "UNet2DModel" else (False, bool(config.get("flip_sin_to_cos", True)))
        if (proj.log, proj.flip_sin_to_cos) != (log, flip):
            raise ValueError(
                f"unet.time_proj has log={proj.log}, flip_sin_to_cos={proj.flip_sin_to_cos}; a "
                f"{kind} built from this config has log={log}, flip_sin_to_cos={flip}"
            )
        new_proj = fourier_from_diffusers(proj)
    else:
        raise ValueError(
            f"unet.config.time_embedding_type={embedding_type!r} is not supported; supported: 'positional', 'fourier'"
        )
    return new_proj.to(unet.device), mlp_from_diffusers(unet.time_embedding)


def patch_diffusers_unet(unet, num_timesteps: int | None = None):
    """Replace ``unet.time_proj`` and ``unet.time_embedding`` by ours, in place; returns ``unet``.

    The convention comes from ``unet.config`` (``flip_sin_to_cos``, ``freq_shift``,
    ``time_embedding_type``); the MLP weights and Fourier frequencies are copied, so the UNet's
    outputs stay the same for integer and fractional, batched and scalar timesteps. SDXL-style
    ``add_time_proj``/``add_embedding`` are swapped too. State-dict keys are unchanged
    (``save_pretrained`` still writes a diffusers checkpoint).

    Args:
        unet: a diffusers ``UNet2DModel`` or ``UNet2DConditionModel``.
        num_timesteps: size of the integer lookup table (default: ``config.num_train_timesteps``
            or 1000); it only speeds up integer steps, values are identical.
    """
    unet.time_proj, unet.time_embedding = _time_modules(unet, num_timesteps)
    timesteps_cls = require_diffusers().models.embeddings.Timesteps
    if isinstance(getattr(unet, "add_time_proj", None), timesteps_cls):
        # SDXL-style addition_embed_type="text_time": the micro-conditioning ids go through a
        # second Timesteps (same flags) and TimestepEmbedding; swap those as well.
        unet.add_time_proj = sinusoid_from_diffusers(unet.add_time_proj).to(unet.device)
        unet.add_embedding = mlp_from_diffusers(unet.add_embedding)
    return unet


def embedder_from_diffusers_unet(unet, num_timesteps: int | None = None) -> TimestepEmbedder:
    """A standalone :class:`TimestepEmbedder` carrying a diffusers UNet's time path and weights."""
    proj, mlp = _time_modules(unet, num_timesteps)
    emb_dim = mlp.linear_2.out_features
    embedder = TimestepEmbedder(emb_dim, mlp.linear_1.in_features)
    embedder.time_proj, embedder.time_embedding = proj, mlp
    return embedder


def to_diffusers_modules(embedder: TimestepEmbedder, ignore_time_input: bool = False):
    """diffusers ``(time_proj, time_embedding)`` with our embedder's convention and weights.

    ``time_proj`` is a ``Timesteps`` (concat layout, max_period 10000 only) or a
    ``GaussianFourierProjection`` (``fold_2pi=False`` only); ``time_embedding`` a
    ``TimestepEmbedding`` loaded strictly with ``embedder.time_embedding``'s weights.
    """
    emb = require_diffusers().models.embeddings
    if embedder.time_input != "identity" and not ignore_time_input:
        raise ValueError(
            f"diffusers' UNets feed t as is, but this embedder maps it with time_input="
            f"{embedder.time_input!r}; map t yourself and pass ignore_time_input=True"
        )
    proj = embedder.time_proj
    if isinstance(proj, SinusoidalEmbedding):
        flags = convention_to_diffusers(proj.convention)
        if flags["max_period"] != 10000.0:
            raise ValueError(f"diffusers' Timesteps has max_period 10000 only; got {flags['max_period']}")
        new_proj = emb.Timesteps(proj.dim, flags["flip_sin_to_cos"], flags["downscale_freq_shift"], flags["scale"])
    elif isinstance(proj, FourierEmbedding) and not proj.fold_2pi:
        new_proj = emb.GaussianFourierProjection(
            proj.dim // 2, set_W_to_weight=False, log=proj.log, flip_sin_to_cos=proj.first == "cos"
        )
        load_state_dict_checked(new_proj, {"weight": proj.weight.detach()}, "FourierEmbedding -> diffusers")
    else:
        raise ValueError(f"time_proj {proj!r} has no diffusers equivalent (fold_2pi=True phases round differently)")
    mlp = embedder.time_embedding
    l1, l2 = mlp.linear_1, mlp.linear_2
    new_mlp = emb.TimestepEmbedding(
        l1.in_features,
        l1.out_features,
        act_fn=_act_name(mlp.act, "act"),
        out_dim=l2.out_features,
        post_act_fn=_act_name(mlp.post_act, "post_act"),
        cond_proj_dim=mlp.cond_proj.in_features if mlp.cond_proj is not None else None,
        sample_proj_bias=l1.bias is not None,
    )
    load_state_dict_checked(new_mlp, mlp.state_dict(), "TimestepMLP -> diffusers TimestepEmbedding")
    return new_proj.to(l1.weight.device), new_mlp.to(device=l1.weight.device, dtype=l1.weight.dtype)


def export_to_diffusers(embedder: TimestepEmbedder, unet, ignore_time_input: bool = False):
    """Write our embedder into a diffusers UNet: its time path becomes ours, in diffusers' modules.

    The UNet's config must describe the same sinusoid (or be a Fourier UNet); the MLP weights
    must fit ``unet.time_embedding`` (errors name the missing/unexpected keys). Returns ``unet``.
    """
    kind = _check_unet(unet)
    proj, mlp = to_diffusers_modules(embedder, ignore_time_input)
    embedding_type = unet.config.get("time_embedding_type", "positional")
    if embedding_type == "positional":
        conv = convention_from_unet_config(unet.config)
        ours = embedder.time_proj.convention if isinstance(embedder.time_proj, SinusoidalEmbedding) else None
        if ours != conv or embedder.time_proj.dim != unet.time_proj.num_channels:
            raise ValueError(
                f"the {kind} config describes a {unet.time_proj.num_channels}-wide sinusoid {conv}; "
                f"the embedder has {embedder.time_proj!r}: outputs would differ"
            )
    elif not isinstance(embedder.time_proj, FourierEmbedding):
        raise ValueError(
            f"the {kind} uses Fourier features (time_embedding_type='fourier'); the embedder has {embedder.time_proj!r}"
        )
    load_state_dict_checked(unet.time_embedding, mlp.state_dict(), f"{kind}.time_embedding")
    if embedding_type == "fourier":
        load_state_dict_checked(unet.time_proj, proj.state_dict(), f"{kind}.time_proj")
    return unet
