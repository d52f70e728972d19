"""Samplers: the reverse process one step at a time, and [`sample`][timestep_embed.ddpm.samplers.sample], the loop that
runs a model through any sampler.

Over a [`Schedule`][timestep_embed.ddpm.Schedule], on a subsequence of its steps:

* ``"ddpm"``: ancestral sampling, Ho et al. 2020, Algorithm 2 (respaced, improved-diffusion style);
* ``"ddim"``: Song et al. 2021, eq. 12 (``eta`` 0: deterministic);
* ``"dpm++2m"``, ``"heun"`` and, for rectified-flow models, ``"euler"``: the ODE solvers of
  [`solvers`][timestep_embed.ddpm.solvers] (``dpm++2m`` and ``heun`` also on Karras noise levels);
* ``"consistency"``: multistep consistency sampling (Song et al. 2023, Algorithm 1), for the models
  ``timestep-embed distill`` makes ([`consistency`][timestep_embed.ddpm.consistency]).

The model is an argument, called as ``model(x_t, t_model)`` (see [`diffusion`][timestep_embed.ddpm.diffusion])
with the VP-scaled ``x_t`` in every sampler.
"""

from __future__ import annotations

import torch

from ..progress import progress as progress_bar
from .consistency import consistency_levels, consistency_sample
from .diffusion import (
    KARRAS_SAMPLERS,
    SAMPLERS,
    Model,
    Schedule,
    coef,
    predict_x0_eps,
    randn,
    respace,
    timestep_subsequence,
    to_device,
)
from .solvers import dpm_solver_2m, flow_euler, heun, karras_levels

__all__ = ["ddpm_step", "ddim_step", "sample"]


def ddpm_step(out, x_t, i: int, schedule: Schedule, *, generator=None, prediction="eps", clip_x0=True, noise_scale=1.0):
    """One ancestral step x_t -> x_{t-1}, Ho et al. Algorithm 2 in the posterior-mean form (eq. 6-7):
    mu = sqrt(abar_prev) beta_t / (1-abar_t) x0_hat + sqrt(alpha_t) (1-abar_prev) / (1-abar_t) x_t,
    sigma^2 = beta~_t = (1-abar_prev) / (1-abar_t) beta_t; no noise at i = 0.
    Equals diffusers' ``DDPMScheduler.step`` (clip_sample, variance "fixed_small") at ``noise_scale=1``.
    ``noise_scale`` multiplies sigma (a sampling temperature, k-diffusion's ``s_noise``; below 1 trades
    diversity for cleaner samples, see docs/ddpm.md). Returns (x_prev, x0_hat)."""
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
        mean = mean + coef(noise_scale * var.sqrt(), x_t) * randn(out.shape, generator, out)
    return mean, x0_hat


def ddim_step(
    out, x_t, i: int, schedule: Schedule, *, eta=0.0, generator=None, prediction="eps", clip_x0=True, noise_scale=1.0
):
    """One DDIM step (Song et al. 2021, eq. 12) from index i to i-1 of ``schedule`` (abar_prev = 1 at i = 0):
    x_prev = sqrt(abar_prev) x0_hat + sqrt(1 - abar_prev - sigma^2) eps_hat + sigma z,
    sigma = eta sqrt((1-abar_prev)/(1-abar_t)) sqrt(1 - abar_t/abar_prev). eps_hat is the model's
    (not re-derived from the clipped x0), noise drawn whenever eta > 0: as diffusers' ``DDIMScheduler.step``.
    ``noise_scale`` multiplies the added noise ``sigma z`` only (the direction term keeps sigma), as in
    [`ddpm_step`][timestep_embed.ddpm.samplers.ddpm_step]."""
    abar, abar_prev = schedule.alphas_cumprod[i : i + 1], schedule.alphas_cumprod_prev[i : i + 1]
    x0_hat, eps_hat = predict_x0_eps(out, x_t, abar, prediction)
    if clip_x0:
        x0_hat = x0_hat.clamp(-1, 1)
    sigma = eta * ((1 - abar_prev) / (1 - abar) * (1 - abar / abar_prev)).sqrt()
    x_prev = coef(abar_prev.sqrt(), x_t) * x0_hat + coef((1 - abar_prev - sigma**2).sqrt(), x_t) * eps_hat
    if eta > 0:
        x_prev = x_prev + coef(noise_scale * sigma, x_t) * randn(out.shape, generator, out)
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
    sigma_max: float | None = 80.0,
    last_sigma: float = 0.5,
    eta: float = 0.0,
    noise_scale: float = 1.0,
    generator: torch.Generator | None = None,
    prediction: str = "eps",
    clip_x0: bool = True,
    device: torch.device | str | None = None,
    x_T: torch.Tensor | None = None,  # noqa: N803
    progress: bool = False,
) -> torch.Tensor:
    """Draw samples [*shape] (float32) with ``sampler`` (see the module docstring) over all T steps
    (``steps=None``) or over ``steps`` of them chosen by ``spacing`` (the model always receives the
    original time values); ``spacing="karras"`` (``dpm++2m`` and ``heun`` only) takes ``steps`` noise
    levels of [`karras_levels`][timestep_embed.ddpm.solvers.karras_levels] capped at ``sigma_max``. x_T ~ N(0, I) is
    drawn with ``generator`` unless given. ``eta``: DDIM only. ``noise_scale``: multiplies the noise each ancestral (or
    DDIM eta > 0) step adds, and the fresh noise of each consistency step; the ODE solvers add none. ``clip_x0``:
    clip every data prediction to [-1, 1]. ``"consistency"`` visits ``steps`` noise levels from ``sigma_max`` down
    to ``last_sigma`` ([`consistency_levels`][timestep_embed.ddpm.consistency.consistency_levels]).
    The caller puts the model in eval mode (and under autocast). Noise is drawn on the generator's device (as
    diffusers' ``randn_tensor``, for the same numbers) and copied to ``device``: a generator on ``device`` saves that
    copy at every noisy step. No step sends anything else from the host.

    Model calls: ``steps`` for ancestral, DDIM, DPM-Solver++(2M) and consistency, ``2 * steps - 1`` for Heun."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler={sampler!r} is not one of {SAMPLERS}")
    if (sampler == "euler") != (prediction == "flow"):
        raise ValueError(
            f"sampler={sampler!r} with prediction={prediction!r}: the euler sampler is for rectified-flow "
            "models (prediction 'flow') and those take no other sampler"
        )
    device = torch.device(device) if device is not None else (x_T.device if x_T is not None else torch.device("cpu"))
    if x_T is not None:
        x = to_device(x_T, device, torch.float32)
    else:
        x = randn(shape, generator, torch.empty(0, device=device))
    if sampler == "consistency":
        noise_levels = consistency_levels(steps or 1, sigma_max or 80.0, last_sigma)
        net = _maybe_progress(model, progress, sampler)
        return consistency_sample(net, x, schedule, noise_levels, generator=generator, prediction=prediction,
                                  noise_scale=noise_scale, clip_x0=clip_x0).float()  # fmt: skip
    if sampler == "euler":
        return flow_euler(_maybe_progress(model, progress, sampler), x, steps or schedule.T, schedule.T).float()
    if spacing == "karras" and sampler not in KARRAS_SAMPLERS:
        raise ValueError(
            f"spacing='karras' with sampler={sampler!r}: Karras noise levels are for the ODE "
            f"solvers {KARRAS_SAMPLERS}; ancestral and DDIM steps need a subsequence of the training steps"
        )
    if sampler in KARRAS_SAMPLERS:
        solver, levels = (heun if sampler == "heun" else dpm_solver_2m), None
        if spacing == "karras":
            levels, at = karras_levels(schedule, steps or schedule.T, sigma_max=sigma_max)
        elif sampler == "heun" and spacing == "evenly" and (steps or schedule.T) > 1:
            # diffusers' HeunDiscreteScheduler ("linspace") steps through linspace(0, T-1, steps) unrounded, in float32
            at = torch.linspace(0, schedule.T - 1, steps or schedule.T, dtype=torch.float64).float().flip(0).tolist()
        elif sampler == "heun":
            at = timestep_subsequence(schedule.T, steps or schedule.T, spacing).flip(0).tolist()
        elif spacing == "trailing":  # diffusers' trailing points end at T / steps - 1: none to drop
            at = timestep_subsequence(schedule.T, steps or schedule.T - 1, spacing).flip(0).tolist()
        else:
            # steps + 1 points without index 0, as diffusers' DPMSolverMultistepScheduler: a second-order step
            # onto index 0 (lambda far beyond its neighbours) would extrapolate the data predictions 2x and more
            at = timestep_subsequence(schedule.T, (steps or schedule.T - 1) + 1, spacing)[1:].flip(0).tolist()
        net = _maybe_progress(model, progress, sampler)
        return solver(net, x, schedule, at, sigmas=levels, prediction=prediction, clip_x0=clip_x0).float()
    subsequence = timestep_subsequence(schedule.T, steps or schedule.T, spacing)
    if steps is not None and steps != schedule.T:
        schedule = respace(schedule, subsequence)
    schedule = schedule.to(device)  # the tables once: each step then computes its coefficients on the device
    net = _maybe_progress(model, progress, sampler)
    for i in range(schedule.T - 1, -1, -1):
        out = net(x, schedule.time_for_model(i, x.shape[0], device)).float()
        if sampler == "ddpm":
            x, _ = ddpm_step(out, x, i, schedule, generator=generator, prediction=prediction, clip_x0=clip_x0,
                             noise_scale=noise_scale)  # fmt: skip
        else:
            x, _ = ddim_step(out, x, i, schedule, eta=eta, generator=generator, prediction=prediction, clip_x0=clip_x0,
                             noise_scale=noise_scale)  # fmt: skip
    return x


def _maybe_progress(model: Model, progress: bool, sampler: str) -> Model:
    """``model``, or a wrapper that advances a progress bar at every call."""
    if not progress:
        return model
    bar = progress_bar(None, f"{sampler} sampling", "call", leave=False)

    def counted(x, t):
        bar.update()
        return model(x, t)

    return counted
