"""The correct time path of every family the port-bug zoo plants its bugs into, with random weights.

`family_embedder` builds a family's time path the way a porter gets it: a synthetic checkpoint
in the family's own key layout (random weights, the widths its models use), read back by
[`TimestepEmbedder.from_state_dict`][timestep_embed.nn.embedder.TimestepEmbedder.from_state_dict], so the sinusoid in
front is the layout's. `family_timesteps` draws what the family's pipeline feeds its model, at random over its
sampling range. Whole diffusers models (guidance, per-token timesteps, block modulations) come from
`timestep_embed.interop.tiny`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..nn import LAYOUTS, TimestepEmbedder, TimestepMLP, to_layout
from .contracts import get_contract
from .tiny import build

__all__ = ["ZOO_FAMILIES", "family_embedder", "family_timesteps", "family_model", "SigmaToT", "FlowSchedule"]

# family -> (its checkpoint layout, sinusoid / Fourier width, how its pipeline's timesteps are drawn)
ZOO_FAMILIES: dict[str, tuple[str, int, str]] = {
    "ddpm": ("ddpm", 32, "steps"),
    "guided_diffusion": ("adm", 32, "steps"),
    "stable_diffusion": ("stable_diffusion_original", 320, "steps"),
    "sdxl": ("sdxl_original", 320, "steps"),
    "dit": ("dit", 256, "steps"),
    "dit_diffusers": ("dit_diffusers", 256, "steps"),
    "pixart": ("pixart", 256, "steps"),
    "sd3": ("sd3", 256, "flow"),
    "flux_dev": ("flux_dev", 256, "sigma"),
    "flux_schnell": ("flux_schnell", 256, "sigma"),
    "wan21": ("wan21", 256, "flow"),
    "hunyuan_video": ("hunyuan_video", 256, "flow"),
    "edm": ("edm", 32, "edm"),
    "edm_vp": ("edm_vp", 32, "vp"),
    "edm_ve": ("edm_ve", 32, "ve"),
    "k_diffusion_compvis": ("stable_diffusion_original", 320, "fractional"),
    "k_diffusion_v1": ("k_diffusion", 32, "karras"),
    "lucidrains_ddpm": ("lucidrains", 32, "steps"),
}
# family -> the tiny diffusers model of its class (timestep_embed.interop.tiny)
TINY_MODELS = {
    "ddpm": "ddpm",
    "stable_diffusion": "stable_diffusion",
    "sdxl": "sdxl",
    "dit_diffusers": "dit",
    "pixart": "pixart",
    "sd3": "sd3",
    "flux_dev": "flux_dev",
    "flux_schnell": "flux_schnell",
    "wan21": "wan",
    "hunyuan_video": "hunyuan_video",
}
EMB = 64


def _markers(layout) -> dict[str, torch.Tensor]:
    """A key holding each marker of ``layout`` (the rest of a model's checkpoint, as far as detection looks)."""
    return {m: torch.zeros(1) for m in layout.markers}


def family_embedder(family: str, seed: int = 0, width: int | None = None) -> TimestepEmbedder:
    """The family's time path with random weights (``seed``), read from a checkpoint in its layout."""
    name, default, _ = ZOO_FAMILIES[family]
    layout = LAYOUTS[name]
    width = width or default
    g = torch.Generator().manual_seed(seed)
    in_dim = width + 1 if layout.fourier and layout.fourier[1].get("include_input") else width
    mlp = TimestepMLP(in_dim, EMB)
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.5 / p.shape[-1] ** 0.5 if p.dim() > 1 else 0.1))
    state = {f"time_embedding.{k}": v for k, v in mlp.state_dict().items()}
    if layout.fourier is not None:
        state["time_proj.weight"] = torch.randn(width // 2, generator=g) * 4
    checkpoint = {**_markers(layout), **to_layout(state, name)}
    return TimestepEmbedder.from_state_dict(checkpoint, layout=name).eval()


class FlowSchedule:
    """FlowMatchEulerDiscreteScheduler's shift: ``sigma -> s sigma / (1 + (s - 1) sigma)`` (SD3: s = 3)."""

    def __init__(self, shift: float = 3.0):
        self.shift = shift

    def __call__(self, sigma: torch.Tensor) -> torch.Tensor:
        return self.shift * sigma / (1 + (self.shift - 1) * sigma)


def family_timesteps(family: str, seed: int = 0, n: int = 6) -> torch.Tensor:
    """What the family's pipeline passes its model as ``timestep``, drawn at random over a sampling run."""
    draw = ZOO_FAMILIES[family][2]
    g = torch.Generator().manual_seed(1000 + seed)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    contract = get_contract(family)
    low, high = contract.raw_range
    if draw == "steps":  # random steps and the last one (bfloat16 turns 999 into 1000)
        raw = torch.randperm(int(high - low), generator=g)[: n - 1].to(torch.int64) + int(low)
        raw = torch.cat([raw, torch.tensor([int(high)])])
    elif draw in ("flow", "sigma"):
        raw = FlowSchedule()(0.02 + 0.98 * u) * 1000  # the scheduler's timesteps: shifted sigma * 1000
    elif draw == "fractional":
        raw = u * 999  # k-diffusion's sigma_to_t: a fractional step index
        return raw.float()
    else:  # EDM / k-diffusion sigmas, log-uniform over the range
        raw = (np.log(low) + u * (np.log(high) - np.log(low))).exp()
    model = contract.to_model(raw)
    return model if model.dtype == torch.int64 else model.float()


def family_model(family: str):
    """``(tiny diffusers model, its other inputs, its pipeline's timesteps)`` of the family's class."""
    return build(TINY_MODELS[family])


class SigmaToT(nn.Module):
    """k-diffusion's CompVisDenoiser in front of a discrete model: ``sigma -> t = sigma_to_t(sigma)``,
    the log-sigma interpolation between the integer steps (crowsonkb/k-diffusion k_diffusion/external.py
    ``DiscreteSchedule.sigma_to_t``), for Stable Diffusion's scaled-linear betas."""

    def __init__(self, model: nn.Module, steps: int = 1000):
        super().__init__()
        self.model = model
        betas = torch.linspace(0.00085**0.5, 0.012**0.5, steps, dtype=torch.float64) ** 2
        alphas = torch.cumprod(1 - betas, 0)
        self.log_sigmas = ((1 - alphas) / alphas).sqrt().log().numpy()

    def forward(self, sigma: torch.Tensor) -> torch.Tensor:
        t = np.interp(sigma.double().log().numpy(), self.log_sigmas, np.arange(len(self.log_sigmas)))
        return self.model(torch.from_numpy(t).float())

    def sigmas(self, t: torch.Tensor) -> torch.Tensor:
        """The sigma of fractional steps ``t`` (the inverse map), to feed this wrapper."""
        return torch.from_numpy(np.exp(np.interp(t.double().numpy(), np.arange(len(self.log_sigmas)), self.log_sigmas)))
