"""How the port-bug zoo plants its bugs: what a buggy pipeline feeds (``candidate_timesteps``), and
the modules of a buggy time path (a sinusoid with its convention changed or its phase in 16 bits,
an activation in the wrong place, a model with a path dropped or its modulation chunks reordered).
Each ``*_case`` function returns the keyword arguments of [`verify_port`][timestep_embed.interop.verify_port] for one
family."""

from __future__ import annotations

import copy
import dataclasses

import torch
from torch import nn

from ..grid import grid_embedding, grid_positions
from ..nn import FourierEmbedding, InModelDtype, SinusoidalEmbedding, TimestepEmbedder, TimestepMLP
from ..sinusoidal import frequencies
from .contracts import get_contract
from .zoo_ports import FlowSchedule, SigmaToT, family_embedder, family_model, family_timesteps

Case = dict  # keyword arguments of verify_port


def sinusoid_of(embedder: TimestepEmbedder) -> SinusoidalEmbedding:
    """The embedder's sinusoid module (inside the cast to the model's dtype, where there is one)."""
    proj = embedder.time_proj
    inner = proj.inner if isinstance(proj, InModelDtype) else proj
    if not isinstance(inner, SinusoidalEmbedding):
        raise TypeError(f"this embedder's time path has {type(inner).__name__}, not a sinusoid")
    return inner


def with_sinusoid(embedder: TimestepEmbedder, cls=SinusoidalEmbedding, **changes) -> TimestepEmbedder:
    """A copy of ``embedder`` (same MLP weights) whose sinusoid has the convention fields ``changes``."""
    out = copy.deepcopy(embedder)
    old = sinusoid_of(out)
    new = cls(
        old.dim,
        dataclasses.replace(old.convention, **changes),
        precise=old.precise,
        scale_in_input_dtype=old.scale_in_input_dtype,
    )
    if isinstance(out.time_proj, InModelDtype):
        out.time_proj.inner = new
    else:
        out.time_proj = new
    return out


class HalfPhaseSinusoid(SinusoidalEmbedding):
    """The sinusoid with its phase ``t * w`` and sin/cos in bfloat16, returned in float32: what a port
    gets computing the embedding in the model's 16-bit dtype (concatenated layouts)."""

    dtype = torch.bfloat16

    def forward(self, t) -> torch.Tensor:
        c = self.convention
        w = frequencies(self.dim, c.freq_shift, c.max_period).to(self.dtype)
        t = torch.as_tensor(t)
        phase = (t.to(self.dtype).reshape(-1, 1) * w) * c.scale
        a, b = phase.sin(), phase.cos()
        if c.first == "cos":
            a, b = b, a
        return torch.cat([a, b], -1).float().reshape(*t.shape, -1)


class ActivationFirst(TimestepMLP):
    """An MLP that applies SiLU to the sinusoid before its first Linear layer (the activation misplaced)."""

    def forward(self, sample: torch.Tensor, condition: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(nn.functional.silu(sample), condition)


def activation_first(embedder: TimestepEmbedder) -> TimestepEmbedder:
    out = copy.deepcopy(embedder)
    mlp = out.time_embedding
    moved = ActivationFirst(mlp.linear_1.in_features, mlp.linear_1.out_features, mlp.linear_2.out_features)
    moved.act, moved.post_act = mlp.act, mlp.post_act
    moved.load_state_dict(mlp.state_dict())
    out.time_embedding = moved
    return out


def without_post_act(embedder: TimestepEmbedder) -> TimestepEmbedder:
    """A copy of ``embedder`` whose MLP lacks its final activation (EDM's ``emb = silu(...)`` dropped)."""
    out = copy.deepcopy(embedder)
    out.time_embedding.post_act = None
    return out


def swap_chunks(model: nn.Module, linear: str, chunks: int = 6, order=(1, 0)) -> nn.Module:
    """A copy of ``model`` whose modulation Linear ``linear`` gives its first chunks in another order
    (shift and scale swapped: the converters' ``swap_scale_shift`` forgotten)."""
    out = copy.deepcopy(model)
    lin = out.get_submodule(linear)
    if not isinstance(lin, nn.Linear):
        raise TypeError(f"linear: {linear!r} is a {type(lin).__name__}, not a Linear layer")
    with torch.no_grad():
        for p in (lin.weight, lin.bias):
            parts = list(p.data.chunk(chunks))
            parts[: len(order)] = [parts[i] for i in order]
            p.data = torch.cat(parts)
    return out


def no_silu_before(model: nn.Module, activation: str) -> nn.Module:
    """A copy of ``model`` whose block applies its modulation Linear to the time embedding without
    the SiLU in front (``activation`` is that SiLU's module path)."""
    out = copy.deepcopy(model)
    parent, _, child = activation.rpartition(".")
    setattr(out.get_submodule(parent) if parent else out, child, nn.Identity())
    return out


# ----------------------------------------------------------------------- cases
def embedder_case(family: str, seed: int, make) -> Case:
    ref = family_embedder(family, seed)
    return {"reference": ref, "candidate": make(ref), "timesteps": family_timesteps(family, seed), "inputs": {}}


def fed(family: str, seed: int, fn) -> Case:
    """The pipeline feeds ``fn(t)`` where ``t`` is expected."""
    t = family_timesteps(family, seed)
    ref = family_embedder(family, seed)
    return {"reference": ref, "candidate": ref, "timesteps": t, "candidate_timesteps": fn(t), "inputs": {}}


def c_noise_for_sigma(family: str, seed: int) -> Case:
    """c_noise = ln(sigma) / 4 fed to a model that logs sigma itself, drawn where sigma > 1: below 1 the
    model's own ln() gets a negative number (NaN in k-diffusion, refused by this package's time_input),
    a crash rather than the silent bug this is above it."""
    case = fed(family, seed, lambda sigma: sigma.double().log() / 4)
    high = get_contract(family).raw_range[1]
    sigma = (case["timesteps"].double().log().abs() + 0.05).exp().clamp(max=high).float()
    return {**case, "timesteps": sigma, "candidate_timesteps": sigma.double().log() / 4}


def model_case(family: str, seed: int, make, inputs_fn=None) -> Case:
    model, inputs, t = family_model(family)
    cand_inputs = inputs_fn(inputs) if inputs_fn else None
    return {
        "reference": model,
        "candidate": make(model),
        "timesteps": t,
        "inputs": inputs,
        "candidate_inputs": cand_inputs,
    }


def flow(t: torch.Tensor) -> float:
    return 1.0 if float(t.abs().max()) <= 1.0 else 1000.0


def grid_case(family: str, seed: int, swap: bool) -> Case:
    positions = grid_positions(3, 5)  # a non-square grid: on equal coordinates x and y cannot be told apart

    def table(flip: bool):
        return {"sinusoid": lambda p: grid_embedding(p.flip(-1) if flip else p, (16, 16), "mae")}

    return {"reference": table(False), "candidate": table(swap), "timesteps": positions}


def per_token(family: str, seed: int) -> Case:
    model, inputs, _ = family_model(family)
    g = torch.Generator().manual_seed(seed)
    steps = FlowSchedule()(torch.rand(2, 2, generator=g)) * 1000  # two frames of 16 tokens each per sample
    per_token = steps.repeat_interleave(16, dim=1)
    return {"reference": model, "candidate": model, "timesteps": per_token, "candidate_timesteps": per_token[:, 0],
            "inputs": inputs}  # fmt: skip


def guidance_dropped(family: str, seed: int) -> Case:
    model, inputs, t = family_model(family)
    config = {**model.config, "guidance_embeds": False}
    dropped = type(model).from_config({k: v for k, v in config.items() if not k.startswith("_")}).eval()
    dropped.load_state_dict(model.state_dict(), strict=False)  # the guidance weights silently left behind
    cand_inputs = {k: v for k, v in inputs.items() if k != "guidance"}
    return {"reference": model, "candidate": dropped, "timesteps": t, "inputs": inputs, "candidate_inputs": cand_inputs}


MODULATIONS = {  # family -> (its first modulation Linear, the SiLU in front of it)
    "sd3": ("transformer_blocks.0.norm1.linear", "transformer_blocks.0.norm1.silu"),
    "flux_dev": ("transformer_blocks.0.norm1.linear", "transformer_blocks.0.norm1.silu"),
    "flux_schnell": ("transformer_blocks.0.norm1.linear", "transformer_blocks.0.norm1.silu"),
    "hunyuan_video": ("transformer_blocks.0.norm1.linear", "transformer_blocks.0.norm1.silu"),
    "dit_diffusers": ("transformer_blocks.0.norm1.linear", "transformer_blocks.0.norm1.silu"),
    "pixart": ("adaln_single.linear", "adaln_single.silu"),
    "wan21": ("condition_embedder.time_proj", "condition_embedder.act_fn"),
}


def respaced(family: str, seed: int) -> Case:
    ref = family_embedder(family, seed)
    use = torch.tensor([0, 3, 17, 29, 41, 49])  # indices into a 50-step respacing of 1000 steps
    original = (use * 999 / 49).round().to(torch.int64)  # improved-diffusion space_timesteps("50")
    return {"reference": ref, "candidate": ref, "timesteps": original, "candidate_timesteps": use, "inputs": {}}


def sigma_for_t(family: str, seed: int) -> Case:
    wrapper = SigmaToT(family_embedder(family, seed))
    sigmas = wrapper.sigmas(family_timesteps(family, seed))
    return {"reference": wrapper, "candidate": wrapper.model, "timesteps": sigmas.float(), "inputs": {}}


def other_shift(e: TimestepEmbedder) -> TimestepEmbedder:
    return with_sinusoid(e, freq_shift=1.0 - sinusoid_of(e).convention.freq_shift)


def bf16(t):
    return t.to(torch.bfloat16)


def fourier_width(ref: TimestepEmbedder) -> TimestepEmbedder:
    """The same family's time path built with a hard-coded width of 16 (and an MLP of that width)."""
    proj = ref.time_proj.inner if isinstance(ref.time_proj, InModelDtype) else ref.time_proj
    new: nn.Module
    if isinstance(proj, FourierEmbedding):
        new = FourierEmbedding(
            16, first=proj.first, fold_2pi=proj.fold_2pi, log=proj.log, include_input=proj.include_input
        )
        new.load_state_dict({"weight": proj.weight[:8].clone()})
    else:
        old = sinusoid_of(ref)
        new = SinusoidalEmbedding(
            16, old.convention, precise=old.precise, scale_in_input_dtype=old.scale_in_input_dtype
        )
    wrapped = InModelDtype(new) if isinstance(ref.time_proj, InModelDtype) else new
    return TimestepEmbedder(ref.emb_dim, time_proj=wrapped, time_input=ref.time_input).eval()
