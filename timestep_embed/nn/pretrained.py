"""The embedder's pretrained folders: its ``config.json`` (the constructor's arguments, flat) both ways,
and what a diffusers model folder's ``config.json`` says that its weights do not.

Our folder: ``config.json`` holds [`TimestepEmbedder`][timestep_embed.TimestepEmbedder]'s own arguments (``emb_dim``,
``sinusoid_dim``, ``convention`` (a preset's name where it is one), ``time_input``, ``num_timesteps``, ``act``,
``post_act``, ``cond_dim``, ``precise``), so ``huggingface_hub.PyTorchModelHubMixin`` rebuilds an embedder with the
default sinusoid and MLP from it; a time path beyond those (Fourier features, the cast to the model's
dtype, another MLP width) is described under ``_time_proj`` / ``_mlp``, which the mixin ignores and
[`TimestepEmbedder.from_pretrained`][timestep_embed.nn.embedder.TimestepEmbedder.from_pretrained] reads.

A diffusers folder (``_class_name``, ``_diffusers_version``): a UNet keeps its sinusoid's flags
(``flip_sin_to_cos``, ``freq_shift``), its MLP's activations (``act_fn``, ``timestep_post_act``) and its
Fourier options (``time_embedding_type``) in the config; `diffusers_options` turns them into the
arguments of [`TimestepEmbedder.from_state_dict`][timestep_embed.nn.embedder.TimestepEmbedder.from_state_dict].
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from ..conventions import PRESETS, Convention, convention_from_diffusers
from ..families import LAYOUT_BY_CLASS  # diffusers classes whose keys are another layout's: the class says which
from .cast import InModelDtype
from .fourier import FourierEmbedding
from .mlp import ACTIVATIONS, TimestepMLP
from .sinusoidal_module import SinusoidalEmbedding

__all__ = ["embedder_config", "embedder_arguments", "diffusers_options"]

_NAMES = {cls: name for name, cls in ACTIVATIONS.items() if name != "swish"}
_CANONICAL = ("adm", "ddpm", "vaswani", "edm", "edm_song", "mae")  # a preset's first name, not an alias
# diffusers UNets: how each builds its GaussianFourierProjection (models/unets/unet_*.py)
_FOURIER: dict[str, Callable[[dict], dict]] = {
    "UNet2DModel": lambda c: {"first": "sin", "log": True},  # set_W_to_weight=True, log=True defaults
    "UNet1DModel": lambda c: {"first": "cos" if c.get("flip_sin_to_cos", True) else "sin", "log": False},
}


def _convention(conv: Convention) -> str | dict:
    name = next((n for n in _CANONICAL if PRESETS[n] == conv), None)
    return name if name is not None else dataclasses.asdict(conv)


def _act(module: nn.Module | None) -> str | None:
    return _NAMES[type(module)] if module is not None else None


def embedder_config(embedder) -> dict:
    """The constructor arguments of ``embedder``, JSON-able (see the module docstring)."""
    proj, mlp = embedder.time_proj, embedder.time_embedding
    inner = proj.inner if isinstance(proj, InModelDtype) else proj
    out = {
        "emb_dim": embedder.emb_dim,
        "sinusoid_dim": mlp.linear_1.in_features,
        "time_input": embedder.time_input,
        "num_timesteps": embedder.num_timesteps,
        "act": _act(mlp.act),
        "post_act": _act(mlp.post_act),
        "cond_dim": mlp.cond_proj.in_features if mlp.cond_proj is not None else None,
    }
    if isinstance(inner, SinusoidalEmbedding):
        out.update(convention=_convention(inner.convention), precise=inner.precise)
        cache = embedder.num_timesteps if embedder.time_input == "identity" else None
        default = (inner.pad_odd, inner.scale_in_input_dtype, inner.num_timesteps, inner.dim) == (
            True, False, cache, out["sinusoid_dim"])  # fmt: skip
        if proj is not inner or not default:
            out["_time_proj"] = {"type": "sinusoid", "dim": inner.dim, "pad_odd": inner.pad_odd,
                                 "scale_in_input_dtype": inner.scale_in_input_dtype,
                                 "num_timesteps": inner.num_timesteps, "in_model_dtype": proj is not inner}  # fmt: skip
    elif isinstance(inner, FourierEmbedding):
        out["_time_proj"] = {"type": "fourier", "dim": inner.dim, "first": inner.first, "fold_2pi": inner.fold_2pi,
                             "log": inner.log, "learnable": isinstance(inner.weight, nn.Parameter),
                             "in_features": inner.in_features, "include_input": inner.include_input,
                             "in_model_dtype": proj is not inner}  # fmt: skip
    else:
        raise ValueError(f"save_pretrained knows SinusoidalEmbedding and FourierEmbedding, not {type(inner).__name__}")
    hidden, bias = mlp.linear_1.out_features, mlp.linear_1.bias is not None
    if hidden != out["emb_dim"] or not bias:
        out["_mlp"] = {"hidden_dim": hidden, "bias": bias}
    return out


def embedder_arguments(config: dict) -> tuple[dict, dict | None]:
    """``(TimestepEmbedder keyword arguments, the MLP's extras or None)`` from a config written by
    `embedder_config`, or by the nested format of earlier versions (``sinusoid`` / ``fourier`` keys)."""
    kwargs = {k: v for k, v in config.items() if not k.startswith("_") and k not in ("sinusoid", "fourier")}
    conv = kwargs.get("convention", "adm")
    if isinstance(conv, dict):
        kwargs["convention"] = Convention(**conv)
    proj = config.get("_time_proj") or _old_proj(config)
    if proj is not None:
        proj = dict(proj)
        kind, cast = proj.pop("type"), proj.pop("in_model_dtype", False)
        if kind == "fourier":
            module: nn.Module = FourierEmbedding(proj.pop("dim"), **proj)
        else:
            module = SinusoidalEmbedding(
                proj.pop("dim"), kwargs.get("convention", "adm"), precise=kwargs.get("precise", False), **proj
            )
        kwargs["time_proj"] = InModelDtype(module) if cast else module
    return kwargs, config.get("_mlp")


def _old_proj(config: dict) -> dict | None:
    if config.get("fourier") is not None:
        return {"type": "fourier", **config["fourier"]}
    if config.get("sinusoid") is not None:
        return {"type": "sinusoid", **config["sinusoid"]}
    return None


def with_mlp(embedder, extras: dict | None):
    """Replace the MLP by one of ``extras``' hidden width and bias (the rest as the embedder's)."""
    if not extras:
        return embedder
    mlp = embedder.time_embedding
    embedder.time_embedding = TimestepMLP(
        mlp.linear_1.in_features,
        extras["hidden_dim"],
        out_dim=mlp.linear_2.out_features,
        act=_act(mlp.act),
        post_act=_act(mlp.post_act),
        cond_dim=mlp.cond_proj.in_features if mlp.cond_proj is not None else None,
        bias=extras["bias"],
    )
    return embedder


def _fourier_default(config: dict) -> dict:
    """UNet2DConditionModel and the UNets built on it: set_W_to_weight=False, log=False, their flip."""
    return {"first": "cos" if config.get("flip_sin_to_cos", True) else "sin", "log": False}


def diffusers_options(config: dict, state: dict[str, torch.Tensor]) -> dict:
    """The [`TimestepEmbedder.from_state_dict`][timestep_embed.nn.embedder.TimestepEmbedder.from_state_dict] arguments a
    diffusers model folder's config gives."""
    name = config.get("_class_name")
    options: dict = {}
    if name in LAYOUT_BY_CLASS:
        options["layout"] = LAYOUT_BY_CLASS[name]
    if any(k in config for k in ("flip_sin_to_cos", "freq_shift", "downscale_freq_shift", "time_theta")):
        options["convention"] = convention_from_diffusers(
            flip_sin_to_cos=bool(config.get("flip_sin_to_cos", True)),
            downscale_freq_shift=float(config.get("freq_shift", config.get("downscale_freq_shift", 0))),
            max_period=float(config.get("time_theta", 10000)),  # BRIA's BriaTimesteps
        )
    if "UNet" in str(name) and name not in LAYOUT_BY_CLASS:
        if config.get("act_fn") in ACTIVATIONS and name != "UNet2DModel":  # UNet2DModel's MLP is SiLU always
            options["act"] = config["act_fn"]
        if config.get("timestep_post_act") is not None:
            options["post_act"] = config["timestep_post_act"]
        if config.get("time_embedding_type") == "fourier" and "time_proj.weight" in state:
            weight = state["time_proj.weight"]
            fourier = _FOURIER[name](config) if name in _FOURIER else _fourier_default(config)
            options["time_proj"] = FourierEmbedding(2 * weight.numel(), **fourier)  # cast with the embedder
            options.pop("convention", None)
    return options
