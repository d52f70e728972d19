"""Our time path in diffusers' modules: the way back from [`patch`][timestep_embed.interop.patch].

[`to_diffusers_modules`][timestep_embed.interop.to_diffusers_modules] builds diffusers' ``Timesteps`` (or
``GaussianFourierProjection``) and ``TimestepEmbedding`` with an embedder's convention and weights;
[`export_to_diffusers`][timestep_embed.interop.export_to_diffusers] writes them into a diffusers UNet. What
diffusers' modules cannot express (the float64 sinusoid, other max periods, an unpadded odd width, Fourier
features with 2 pi folded in ...) is refused by name: it would run with other outputs.
"""

from __future__ import annotations

from ..conventions import convention_to_diffusers
from ..nn import FourierEmbedding, SinusoidalEmbedding, TimestepEmbedder
from ..nn.time_path import load_state_dict_checked
from .patch import _act_name, _check_unet, convention_from_unet_config, require_diffusers

__all__ = ["to_diffusers_modules", "export_to_diffusers"]


def _check_expressible(proj) -> None:
    """Refuse by name a time projection whose numbers diffusers' ``Timesteps`` / ``GaussianFourierProjection``
    cannot give: they would run, with other outputs or another width."""
    if isinstance(proj, SinusoidalEmbedding):
        flags = convention_to_diffusers(proj.convention)  # refuses what has no flags (layout, gain)
        unlike = {
            "max_period": (flags["max_period"], flags["max_period"] != 10000.0),  # Timesteps has 10000 only
            "precise": (proj.precise, proj.precise),  # diffusers computes in float32
            "pad_odd": (proj.pad_odd, not proj.pad_odd),  # diffusers pads an odd width with a zero column
            # diffusers scales the float32 phase, not t in its dtype
            "scale_in_input_dtype": (proj.scale_in_input_dtype, proj.scale_in_input_dtype and flags["scale"] != 1),
        }
    elif isinstance(proj, FourierEmbedding):
        unlike = {
            "fold_2pi": (proj.fold_2pi, proj.fold_2pi),  # x * (2 pi w) rounds other than diffusers' x * w * 2 pi
            "in_features": (proj.in_features, proj.in_features is not None),  # diffusers' weight is [dim // 2]
            "include_input": (proj.include_input, proj.include_input),  # a column more than diffusers gives
        }
    else:
        raise ValueError(f"time_proj {proj!r} has no diffusers equivalent (a sinusoid or Fourier features are needed)")
    values = ", ".join(f"{name}={value!r}" for name, (value, differs) in unlike.items() if differs)
    if values:
        raise ValueError(f"time_proj {proj!r}: {values} has no diffusers equivalent (its outputs would differ)")


def to_diffusers_modules(embedder: TimestepEmbedder, ignore_time_input: bool = False):
    """diffusers ``(time_proj, time_embedding)`` with our embedder's convention and weights.

    ``time_proj`` is a ``Timesteps`` (concat layout, max_period 10000, float32, odd widths padded) or a
    ``GaussianFourierProjection`` in the weight's dtype (``fold_2pi=False``, a ``[dim // 2]`` weight, no input
    column); anything else is refused by name. ``time_embedding`` is a ``TimestepEmbedding`` loaded strictly with
    ``embedder.time_embedding``'s weights.
    """
    emb = require_diffusers().models.embeddings
    if embedder.time_input != "identity" and not ignore_time_input:
        raise ValueError(
            f"diffusers' UNets feed t as is, but this embedder maps it with time_input="
            f"{embedder.time_input!r}; map t yourself and pass ignore_time_input=True"
        )
    proj = embedder.time_proj
    _check_expressible(proj)
    if isinstance(proj, SinusoidalEmbedding):
        flags = convention_to_diffusers(proj.convention)
        new_proj = emb.Timesteps(proj.dim, flags["flip_sin_to_cos"], flags["downscale_freq_shift"], flags["scale"])
    else:
        assert isinstance(proj, FourierEmbedding)  # _check_expressible refused the rest
        new_proj = emb.GaussianFourierProjection(
            proj.dim // 2, set_W_to_weight=False, log=proj.log, flip_sin_to_cos=proj.first == "cos"
        )
        new_proj = new_proj.to(proj.weight.dtype)  # diffusers forms the phase in the weight's dtype, as we do
        load_state_dict_checked(new_proj, {"weight": proj.weight.detach()}, "FourierEmbedding -> diffusers")
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
    elif not isinstance(embedder.time_proj, FourierEmbedding) or (proj.log, proj.flip_sin_to_cos) != (
        unet.time_proj.log,
        unet.time_proj.flip_sin_to_cos,
    ):
        theirs = f"log={unet.time_proj.log}, flip_sin_to_cos={unet.time_proj.flip_sin_to_cos}"
        raise ValueError(
            f"the {kind} uses Fourier features (time_embedding_type='fourier', {theirs}); the embedder has "
            f"{embedder.time_proj!r}: outputs would differ"
        )
    load_state_dict_checked(unet.time_embedding, mlp.state_dict(), f"{kind}.time_embedding")
    if embedding_type == "fourier":
        load_state_dict_checked(unet.time_proj, proj.state_dict(), f"{kind}.time_proj")
    return unet
