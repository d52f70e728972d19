"""Samplers: the reverse process, one step at a time, and the loop that runs a model through it.

Ancestral DDPM (Ho et al. 2020, Algorithm 2) and DDIM (Song et al. 2021, eq. 12) over a
:class:`~timestep_embed.ddpm.diffusion.Schedule`, respaced to fewer steps when asked. The model is an
argument, called as ``model(x_t, t_model)`` (see :mod:`~timestep_embed.ddpm.diffusion`).
"""

from __future__ import annotations

import torch

from .diffusion import Model, Schedule, coef, predict_x0_eps, randn, respace, timestep_subsequence

__all__ = ["SAMPLERS", "ddpm_step", "ddim_step", "sample"]

SAMPLERS = ("ddpm", "ddim")


def ddpm_step(out, x_t, i: int, schedule: Schedule, *, generator=None, prediction="eps", clip_x0=True):
    """One ancestral step x_t -> x_{t-1}, Ho et al. Algorithm 2 in the posterior-mean form (eq. 6-7):
    mu = sqrt(abar_prev) beta_t / (1-abar_t) x0_hat + sqrt(alpha_t) (1-abar_prev) / (1-abar_t) x_t,
    sigma^2 = beta~_t = (1-abar_prev) / (1-abar_t) beta_t; no noise at i = 0.
    Equals diffusers' ``DDPMScheduler.step`` (clip_sample, variance "fixed_small"). Returns (x_prev, x0_hat)."""
    abar, abar_prev, beta = (
        v[i : i + 1] for v in (schedule.alphas_cumprod, schedule.alphas_cumprod_prev, schedule.betas)
    )
    x0_hat, _ = predict_x0_eps(out, x_t, abar, prediction)
    if clip_x0:
        x0_hat = x0_hat.clamp(-1, 1)
    mean = (
        coef(abar_prev.sqrt() * beta / (1 - abar), x_t) * x0_hat
        + coef((1 - beta).sqrt() * (1 - abar_prev) / (1 - abar), x_t) * x_t
    )
    if i > 0:
        var = ((1 - abar_prev) / (1 - abar) * beta).clamp(min=1e-20)
        mean = mean + coef(var.sqrt(), x_t) * randn(out.shape, generator, out)
    return mean, x0_hat


def ddim_step(out, x_t, i: int, schedule: Schedule, *, eta=0.0, generator=None, prediction="eps", clip_x0=True):
    """One DDIM step (Song et al. 2021, eq. 12) from index i to i-1 of ``schedule`` (abar_prev = 1 at i = 0):
    x_prev = sqrt(abar_prev) x0_hat + sqrt(1 - abar_prev - sigma^2) eps_hat + sigma z,
    sigma = eta sqrt((1-abar_prev)/(1-abar_t)) sqrt(1 - abar_t/abar_prev). eps_hat is the model's
    (not re-derived from the clipped x0), noise drawn whenever eta > 0: as diffusers' ``DDIMScheduler.step``."""
    abar, abar_prev = schedule.alphas_cumprod[i : i + 1], schedule.alphas_cumprod_prev[i : i + 1]
    x0_hat, eps_hat = predict_x0_eps(out, x_t, abar, prediction)
    if clip_x0:
        x0_hat = x0_hat.clamp(-1, 1)
    sigma = eta * ((1 - abar_prev) / (1 - abar) * (1 - abar / abar_prev)).sqrt()
    x_prev = coef(abar_prev.sqrt(), x_t) * x0_hat + coef((1 - abar_prev - sigma**2).sqrt(), x_t) * eps_hat
    if eta > 0:
        x_prev = x_prev + coef(sigma, x_t) * randn(out.shape, generator, out)
    return x_prev, x0_hat


@torch.no_grad()
def sample(
    model: Model,
    shape: tuple[int, ...],
    schedule: Schedule,
    *,
    sampler: str = "ddpm",
    steps: int | None = None,
    spacing: str = "evenly",
    eta: float = 0.0,
    generator: torch.Generator | None = None,
    prediction: str = "eps",
    clip_x0: bool = True,
    device: torch.device | str | None = None,
    x_T: torch.Tensor | None = None,  # noqa: N803
    progress: bool = False,
) -> torch.Tensor:
    """Draw samples [*shape] (float32) by ancestral sampling (Ho et al. Algorithm 2, ``sampler="ddpm"``)
    or DDIM (``sampler="ddim"``, ``eta`` 0 = deterministic), over all T steps (``steps=None``) or over
    ``steps`` of them chosen by ``spacing`` (the schedule is then respaced; the model still receives
    the original time values). x_T ~ N(0, I) is drawn with ``generator`` unless given.
    The caller puts the model in eval mode (and under autocast if wanted)."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler={sampler!r} is not one of {SAMPLERS}")
    if steps is not None and steps != schedule.T:
        schedule = respace(schedule, timestep_subsequence(schedule.T, steps, spacing))
    device = torch.device(device) if device is not None else (x_T.device if x_T is not None else torch.device("cpu"))
    x = x_T.to(device, torch.float32) if x_T is not None else randn(shape, generator, torch.empty(0, device=device))
    indices = range(schedule.T - 1, -1, -1)
    if progress:
        from tqdm.auto import tqdm

        indices = tqdm(indices, desc=f"{sampler} sampling", leave=False)
    for i in indices:
        out = model(x, schedule.time_for_model(i, x.shape[0]).to(device)).float()
        if sampler == "ddpm":
            x, _ = ddpm_step(out, x, i, schedule, generator=generator, prediction=prediction, clip_x0=clip_x0)
        else:
            x, _ = ddim_step(out, x, i, schedule, eta=eta, generator=generator, prediction=prediction, clip_x0=clip_x0)
    return x
