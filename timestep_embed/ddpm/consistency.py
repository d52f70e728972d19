"""Consistency models from a diffusion model: the parameterisation, the tuning loss and the multistep sampler.

No nn.Module here: the model is an argument, called as in [`diffusion`][timestep_embed.ddpm.diffusion].

Symbols: the variance-exploding view of a VP schedule (Karras et al. 2022, "EDM", sec. 2):
``x = x_vp / sqrt(abar) = x0 + sigma eps`` with ``sigma = sqrt((1 - abar) / abar)``. A consistency function
``f(x, sigma)`` maps every point of one probability-flow ODE trajectory to its start ``x0``, with the boundary
condition ``f(x, 0) = x`` (Song et al. 2023, "Consistency Models", eq. 3). Here ``f`` is the diffusion model's own
data prediction, EDM's denoiser ``D(x, sigma) = x - sigma eps_hat(x / sqrt(1 + sigma^2), t(sigma))``: the boundary
condition holds exactly, and a student that starts as the teacher's weights starts as its one-step denoiser, which
is where easy consistency tuning begins (Geng et al. 2024, "ECT", sec. 3).

Training ([`consistency_loss`][timestep_embed.ddpm.consistency.consistency_loss]): sigma_t log-normal (centred on the
sampler's levels by default, not ECT's broad N(-1.1, 2^2): measured better for 6 minutes of tuning), a nearer
level r(t) < t that moves towards t stage by stage (ECT's mapping, sec. 3.2), and the pseudo-Huber distance between
``f(x_t, t)`` and the stopped-gradient ``f(x_r, r)`` weighted by 1 / (t - r) (Song & Dhariwal 2023, "iCT"; ECT), or by
EDM's loss weight (``weighting="edm"``; measured worse here, docs/ddpm.md).
``x_r`` is ``x0 + r eps`` with the same ``eps`` (consistency tuning/training, ``method="ect"``) or one Euler step of
the teacher's ODE from ``x_t`` (consistency distillation, ``method="cd"``, Song et al. 2023 Algorithm 2).
Sampling ([`consistency_sample`][timestep_embed.ddpm.consistency.consistency_sample]): Song et al. 2023 Algorithm 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from .diffusion import (
    Model,
    Schedule,
    coef,
    gather,
    index_at_sigma,
    log_sigma_table,
    predict_x0_eps,
    randn,
    to_device,
    wide_dtype,
)
from .schema import check_section

__all__ = [
    "ConsistencyConfig",
    "model_time_at",
    "consistency_function",
    "nearer_sigma",
    "consistency_loss",
    "consistency_levels",
    "consistency_sample",
]

Method = Literal["ect", "cd"]  # consistency tuning (the data's own noise) or distillation (the teacher's ODE step)
Weighting = Literal["gap", "edm"]  # 1 / (t - r) (iCT, ECT) or 1 / t^2 + 1 / sigma_data^2 (EDM's lambda)


@dataclass
class ConsistencyConfig:
    """The consistency objective (``consistency`` in a run's config; ``null`` for a diffusion run).

    ``timestep-embed distill`` sets it on a trained run's config; the budget and the optimizer are ``train.*``."""

    KEY: ClassVar[str] = "consistency"
    RANGES: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("sigma_max", "sigma_std", "huber_c", "stages", "sigma_data"), "> 0"),
        "mapping_k": ">= 0",
    }
    method: Method = "ect"
    sigma_max: float = 10.0  # the largest training sigma (and the sampler's first level)
    # ln sigma_t ~ N(sigma_mean, sigma_std^2): centred on the 4-step sampler's levels (10 to 0.5), where a short
    # tuning spends its steps; ECT's (iCT's) N(-1.1, 2^2), for training from scratch, measured worse (docs/ddpm.md)
    sigma_mean: float = 0.3
    sigma_std: float = 0.6
    stages: int = 2  # r(t) moves towards t in this many stages over the budget: t - r halves each stage
    mapping_k: float = 8.0  # ECT's n(t) = 1 + k sigmoid(-t): small sigmas take larger steps
    huber_c: float = 0.015  # pseudo-Huber c: iCT's 0.00054 sqrt(d) for d = 28 * 28 pixels
    weighting: Weighting = "gap"
    sigma_data: float = 0.5  # EDM's sigma_data, for weighting "edm"

    def __post_init__(self) -> None:
        check_section(self)


def model_time_at(schedule: Schedule, sigma: torch.Tensor) -> torch.Tensor:
    """The model's time input (float32 [B]) at noise levels ``sigma`` [B]: ``schedule.model_t`` at the fractional
    index where the schedule has those levels ([`index_at_sigma`][timestep_embed.ddpm.diffusion.index_at_sigma]),
    linear between steps. The training steps themselves get their own ``model_t`` exactly."""
    index = index_at_sigma(schedule, sigma)
    lo = index.floor().long()
    hi = (lo + 1).clamp(max=schedule.T - 1)
    at_lo = gather(schedule.model_t, lo)
    return (at_lo + (index - lo) * (gather(schedule.model_t, hi) - at_lo)).float()


def consistency_function(
    model: Model, x: torch.Tensor, sigma: torch.Tensor, schedule: Schedule, prediction: str = "eps"
) -> torch.Tensor:
    """f(x, sigma) = D(x, sigma), the data prediction of an eps- or v-model at the VE point ``x`` [B, ...] and noise
    levels ``sigma`` (float [B], >= 0); exactly ``x`` where sigma is 0 (the boundary condition, Song et al. eq. 3)."""
    sigma64 = sigma.detach().to(wide_dtype(sigma.device))
    abar = 1 / (1 + sigma64**2)
    x_vp = coef(abar.sqrt(), x) * x
    out = model(x_vp, to_device(model_time_at(schedule, sigma64), x.device)).to(x.dtype)
    x0, _ = predict_x0_eps(out, x_vp, abar, prediction)
    return torch.where(coef(sigma64, x) == 0, x, x0)


def nearer_sigma(t: torch.Tensor, stage: int, mapping_k: float = 8.0, q: float = 2.0) -> torch.Tensor:
    """ECT's r(t) (Geng et al. 2024, sec. 3.2): r = t (1 - n(t) / q^(stage + 1)), n(t) = 1 + k sigmoid(-t), clamped
    at 0, so r = 0 (plain denoising) for the small sigmas at first and t - r halves with each stage."""
    n = 1 + mapping_k * torch.sigmoid(-t)
    return (t * (1 - n / q ** (stage + 1))).clamp(min=0)


def consistency_loss(
    model: Model,
    x0: torch.Tensor,
    schedule: Schedule,
    cfg: ConsistencyConfig,
    stage: int,
    *,
    teacher: Model | None = None,
    generator: torch.Generator | None = None,
    prediction: str = "eps",
) -> torch.Tensor:
    """The consistency loss of a batch ``x0`` [B, C, H, W] (float32 scalar): ln t ~ N(sigma_mean, sigma_std^2) capped
    at ``sigma_max``, r = [`nearer_sigma`][timestep_embed.ddpm.consistency.nearer_sigma](t, stage), x_t = x0 + t eps,
    x_r as the module docstring says (``cfg.method``; ``"cd"`` needs ``teacher``), loss = mean over the batch of
    w(t, r) (sqrt(||f(x_t, t) - sg f(x_r, r)||^2 + c^2) - c), with w = 1 / (t - r) (``weighting="gap"``, iCT and
    ECT) or EDM's loss weight 1 / t^2 + 1 / sigma_data^2 (``"edm"``, Karras et al. 2022 eq. 8)."""
    if cfg.method == "cd" and teacher is None:
        raise ValueError("consistency method 'cd' (distillation) needs the teacher model")
    teacher = teacher if cfg.method == "cd" else None
    dev = generator.device if generator is not None else x0.device
    log_t = cfg.sigma_mean + cfg.sigma_std * torch.randn(x0.shape[0], generator=generator, device=dev)
    wide = wide_dtype(log_t.device)
    smallest = to_device(log_sigma_table(schedule)[:1], log_t.device, wide)  # a tensor bound: no read
    t = log_t.to(wide).clamp(min=smallest).clamp(max=math.log(cfg.sigma_max)).exp()
    r = nearer_sigma(t, stage, cfg.mapping_k)
    eps = randn(x0.shape, generator, x0)
    x_t = x0 + coef(t, x0) * eps
    with torch.no_grad():
        if teacher is None:  # ect
            x_r = x0 + coef(r, x0) * eps
        else:  # one Euler step of the teacher's probability-flow ODE, dx/dsigma = (x - D(x, sigma)) / sigma
            d = (x_t - consistency_function(teacher, x_t, t, schedule, prediction).float()) / coef(t, x0)
            x_r = x_t + coef(r - t, x0) * d
        target = consistency_function(model, x_r, r, schedule, prediction).float()
    pred = consistency_function(model, x_t, t, schedule, prediction).float()
    distance = ((pred - target).pow(2).flatten(1).sum(1) + cfg.huber_c**2).sqrt() - cfg.huber_c
    weight = 1 / (t - r) if cfg.weighting == "gap" else 1 / t**2 + 1 / cfg.sigma_data**2
    return (distance * to_device(weight.float(), x0.device)).mean()


def consistency_levels(steps: int, sigma_max: float, last_sigma: float) -> list[float]:
    """``steps`` noise levels from ``sigma_max`` down to ``last_sigma``, evenly spaced in log sigma (one: sigma_max)."""
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"steps={steps!r}: expected a positive int")
    if not 0 < last_sigma <= sigma_max:
        raise ValueError(f"last_sigma={last_sigma!r}: expected a noise level in (0, sigma_max={sigma_max!r}]")
    if steps == 1:
        return [float(sigma_max)]
    ratio = math.log(last_sigma / sigma_max) / (steps - 1)
    return [float(sigma_max * math.exp(i * ratio)) for i in range(steps)]


@torch.no_grad()
def consistency_sample(
    model: Model,
    x: torch.Tensor,
    schedule: Schedule,
    levels: list[float],
    *,
    generator: torch.Generator | None = None,
    prediction: str = "eps",
    noise_scale: float = 1.0,
    clip_x0: bool = True,
) -> torch.Tensor:
    """Multistep consistency sampling (Song et al. 2023, Algorithm 1) from ``x`` ~ N(0, I) [B, C, H, W]: x0 =
    f(levels[0] x, levels[0]), then at each further level x0 = f(x0 + noise_scale level z, level), one model call a
    level; each x0 clipped to [-1, 1] when ``clip_x0``. Returns x0 (the dtype of ``x``)."""
    batch, wide = x.shape[0], wide_dtype(x.device)
    schedule = schedule.to(x.device)  # the tables once: each level then sends nothing from the host

    def f(point: torch.Tensor, level: float) -> torch.Tensor:
        sigma = torch.full((batch,), level, dtype=wide, device=x.device)
        x0 = consistency_function(model, point, sigma, schedule, prediction)
        return x0.clamp(-1, 1) if clip_x0 else x0

    x0 = f(levels[0] * x, levels[0])
    for level in levels[1:]:
        x0 = f(x0 + noise_scale * level * randn(x.shape, generator, x), level)
    return x0
