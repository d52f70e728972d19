"""The ODE solvers of the probability-flow ODE, and the noise levels they step on.

* [`dpm_solver_2m`][timestep_embed.ddpm.solvers.dpm_solver_2m]: DPM-Solver++(2M), Lu et al. 2022 ("DPM-Solver++",
  Algorithm 2, data prediction, multistep second order), the first step and the last (to sigma = 0) first order;
* [`heun`][timestep_embed.ddpm.solvers.heun]: Karras et al. 2022 (EDM), Algorithm 1 with S_churn = 0: Heun's
  second-order method in sigma = sqrt((1 - abar) / abar), the last step (to sigma = 0) Euler;
* [`flow_euler`][timestep_embed.ddpm.solvers.flow_euler]: for rectified-flow models (``prediction="flow"``) only:
  Euler steps of dx/dt = u from t = 1 to 0 (Liu et al. 2022), on the times of diffusers'
  ``FlowMatchEulerDiscreteScheduler``.

The first two also take the noise levels of Karras et al. 2022, eq. 5
([`karras_levels`][timestep_embed.ddpm.solvers.karras_levels]): evenly spaced in sigma^(1/rho), rho = 7, from
``sigma_max`` down to the schedule's smallest sigma, the model called at the fractional index of each sigma. The model
is an argument, called as ``model(x_t, t_model)`` (see [`diffusion`][timestep_embed.ddpm.diffusion]) with the VP-scaled
``x_t``. The solvers run in the dtype of ``x`` (float64 in the parity tests against diffusers'
``DPMSolverMultistepScheduler`` and ``HeunDiscreteScheduler``).
"""

from __future__ import annotations

import math

import torch

from .diffusion import Model, Schedule, index_at_sigma

__all__ = ["dpm_solver_2m", "heun", "flow_euler", "karras_levels", "model_time"]


def _sigma_ve(schedule: Schedule, index: float) -> float:
    """sigma_VE = sqrt((1 - abar) / abar) at a (fractional) index, linear between the steps (diffusers, k-diffusion)."""
    abar = schedule.alphas_cumprod
    lo = min(int(math.floor(index)), schedule.T - 1)
    hi, frac = min(lo + 1, schedule.T - 1), index - lo
    s_lo, s_hi = (float(((1 - abar[k]) / abar[k]).sqrt()) for k in (lo, hi))
    return s_lo + frac * (s_hi - s_lo)


def karras_levels(
    schedule: Schedule, steps: int, *, sigma_max: float | None = 80.0, rho: float = 7.0
) -> tuple[list[float], list[float]]:
    """The noise levels of Karras et al. 2022, eq. 5, and the fractional indices where ``schedule`` has them.

    sigma_i = (s_max^(1/rho) + i / (steps - 1) (s_min^(1/rho) - s_max^(1/rho)))^rho, i = 0 .. steps - 1, with
    s_min the schedule's sigma_VE at index 0 and s_max = min(``sigma_max``, its sigma at T - 1) (``None``: no
    cap). The indices interpolate linearly in log sigma. That is diffusers' ``use_karras_sigmas=True``
    (``_convert_to_karras``, ``_sigma_to_t``), whose cap is ``EulerDiscreteScheduler``'s ``sigma_max``;
    the default 80 is EDM's. The cap is what lets Heun start on the cosine schedule, whose last sigma is ~2e4.
    """
    if steps < 1:
        raise ValueError(f"steps={steps!r}: expected a positive number of noise levels")
    if sigma_max is not None and not (math.isfinite(sigma_max) and sigma_max > 0):
        raise ValueError(f"sigma_max={sigma_max!r}: expected a positive finite noise level, or None for no cap")
    top, s_min = _sigma_ve(schedule, schedule.T - 1), _sigma_ve(schedule, 0)
    if sigma_max is not None and sigma_max <= s_min:
        raise ValueError(
            f"sigma_max={sigma_max!r}: expected a noise level above the schedule's smallest sigma {s_min:.4g}"
        )
    s_max = top if sigma_max is None else min(sigma_max, top)
    lo, hi = s_min ** (1 / rho), s_max ** (1 / rho)
    sigmas = [(hi + (i / max(steps - 1, 1)) * (lo - hi)) ** rho for i in range(steps)]
    return sigmas, index_at_sigma(schedule, torch.tensor(sigmas, dtype=torch.float64)).tolist()


def model_time(schedule: Schedule, index: float, batch: int, device) -> torch.Tensor:
    """What the model gets at a (fractional) index: ``schedule.model_t`` there (int64 when whole and discrete), read
    on the host and filled on ``device`` (nothing copied)."""
    lo = int(math.floor(index))
    t = float(schedule.model_t[lo])
    if index == lo and schedule.integer_time:
        return torch.full((batch,), round(t), dtype=torch.long, device=device)
    if index != lo:
        t += (index - lo) * (float(schedule.model_t[min(lo + 1, schedule.T - 1)]) - t)
    return torch.full((batch,), t, dtype=torch.float32, device=device)


def _x0(out: torch.Tensor, x: torch.Tensor, alpha: float, sigma: float, prediction: str, clip: bool) -> torch.Tensor:
    """The data prediction from a VP-scaled ``x`` and the model output (eps or v), clipped to [-1, 1]
    when ``clip`` (diffusers' ``clip_sample`` / ``thresholding`` with a fixed range)."""
    x0 = (x - sigma * out) / alpha if prediction == "eps" else alpha * x - sigma * out
    return x0.clamp(-1, 1) if clip else x0


def _levels(schedule: Schedule, timesteps, sigmas) -> list[float]:
    """The solvers' noise levels (sigma_VE): ``sigmas`` as given (Karras levels), or the schedule's at ``timesteps``."""
    if sigmas is None:
        return [_sigma_ve(schedule, float(t)) for t in timesteps]
    if len(sigmas) != len(timesteps):
        raise ValueError(f"sigmas: {len(sigmas)} noise levels for {len(timesteps)} timesteps; expected one each")
    return [float(s) for s in sigmas]


def dpm_solver_2m(
    model: Model,
    x: torch.Tensor,
    schedule: Schedule,
    timesteps,
    *,
    sigmas=None,
    prediction: str = "eps",
    clip_x0: bool = False,
) -> torch.Tensor:
    """DPM-Solver++(2M) (Lu et al. 2022, Algorithm 2) from ``x`` (VP-scaled, at ``timesteps[0]``) down
    ``timesteps`` (descending indices of ``schedule``) and a last step to sigma = 0; returns x0.

    With lambda = ln(alpha / sigma), h = lambda_next - lambda and the data predictions D:
    x_next = (sigma_next / sigma) x - alpha_next (e^-h - 1) [D + (D - D_prev) / (2 r)], r = h_prev / h;
    the first step and the last use D alone (first order). diffusers' ``DPMSolverMultistepScheduler``
    with its defaults (``solver_order=2``, ``"dpmsolver++"``, ``"midpoint"``, ``final_sigmas_type="zero"``).
    ``sigmas``: the noise levels' sigma_VE, one per timestep
    ([`karras_levels`][timestep_embed.ddpm.solvers.karras_levels]); by default the schedule's at ``timesteps``.
    """
    points = [(1.0 / math.sqrt(1.0 + s**2), s / math.sqrt(1.0 + s**2)) for s in _levels(schedule, timesteps, sigmas)]
    points.append((1.0, 0.0))
    lambdas = [math.log(a) - math.log(s) if s > 0 else math.inf for a, s in points]
    previous = None
    for k, t in enumerate(timesteps):
        (alpha, sigma), (alpha_next, sigma_next) = points[k], points[k + 1]
        out = model(x, model_time(schedule, float(t), x.shape[0], x.device)).to(x.dtype)
        d = _x0(out, x, alpha, sigma, prediction, clip_x0)
        h = lambdas[k + 1] - lambdas[k]
        step = -alpha_next * math.expm1(-h)  # alpha_next (1 - e^-h)
        if previous is None or sigma_next == 0:
            x = (sigma_next / sigma) * x + step * d
        else:
            r = (lambdas[k] - lambdas[k - 1]) / h
            x = (sigma_next / sigma) * x + step * (d + (d - previous) / (2 * r))
        previous = d
    return x


def heun(
    model: Model,
    x: torch.Tensor,
    schedule: Schedule,
    timesteps,
    *,
    sigmas=None,
    prediction: str = "eps",
    clip_x0: bool = False,
) -> torch.Tensor:
    """Heun's method on the probability-flow ODE in sigma (Karras et al. 2022, Algorithm 1, S_churn = 0)
    from unit noise ``x`` (scaled to N(0, sigma_0^2) at ``timesteps[0]``) down ``timesteps`` (descending,
    fractional allowed) to sigma = 0; returns x0. Two model calls a step, one for the last (Euler).

    In x = x0 + sigma eps (VE scaling) with D(x, sigma) the data prediction and dx/dsigma = (x - D) / sigma;
    the model sees x / sqrt(1 + sigma^2), as diffusers' ``HeunDiscreteScheduler`` and k-diffusion do.
    ``sigmas``: the noise levels' sigma_VE, one per timestep
    ([`karras_levels`][timestep_embed.ddpm.solvers.karras_levels]); by default the schedule's at ``timesteps``.
    """
    sigmas = [*_levels(schedule, timesteps, sigmas), 0.0]
    x = x * sigmas[0]  # Algorithm 1: x ~ N(0, sigma_0^2 I) from the unit noise x (as k-diffusion, diffusers)

    def slope(x_ve: torch.Tensor, k: int) -> torch.Tensor:
        scale = math.sqrt(1.0 + sigmas[k] ** 2)
        t = model_time(schedule, float(timesteps[k]), x.shape[0], x.device)
        out = model(x_ve / scale, t).to(x.dtype)
        return (x_ve - _x0(out, x_ve / scale, 1.0 / scale, sigmas[k] / scale, prediction, clip_x0)) / sigmas[k]

    for k in range(len(timesteps)):
        d = slope(x, k)
        dt = sigmas[k + 1] - sigmas[k]
        euler = x + d * dt
        x = euler if sigmas[k + 1] == 0 else x + 0.5 * (d + slope(euler, k + 1)) * dt
    return x


def flow_euler(model: Model, x: torch.Tensor, steps: int, num_train_timesteps: int = 1000) -> torch.Tensor:
    """Euler on the rectified flow dx/dt = u(x, t) from noise ``x`` at t = 1 to t = 0; returns x0.

    The times are diffusers' ``FlowMatchEulerDiscreteScheduler``'s (shift 1): t_k = linspace(1, 1/T, steps),
    then 0; the model sees ``1000 t_k`` and x_{k+1} = x_k + (t_{k+1} - t_k) u. One model call a step."""
    times = torch.linspace(1.0, 1.0 / num_train_timesteps, steps, dtype=torch.float64).tolist() + [0.0]
    for t, t_next in zip(times[:-1], times[1:], strict=True):
        u = model(x, torch.full((x.shape[0],), 1000 * t, dtype=torch.float32, device=x.device)).to(x.dtype)
        x = x + (t_next - t) * u
    return x
