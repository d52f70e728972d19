"""Gaussian diffusion math with the papers' symbols. No nn.Module here: the model is an argument.

Symbols (Ho et al. 2020, "DDPM"): beta_t, alpha_t = 1 - beta_t, abar_t = prod_{s<=t} alpha_s,
x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps. Indices are 0-based (index i is the paper's t = i+1).

How the model is called: ``model(x_t, t_model)`` with ``x_t`` ``[B, C, H, W]`` and ``t_model`` a
``[B]`` tensor holding ``schedule.model_t[i]``:

* discrete schedules: the integer index 0..T-1 as int64 (what diffusers' UNets receive);
* respaced schedules (fewer sampling steps): the ORIGINAL index in 0..T-1, never the position in
  the subsequence (as improved-diffusion's ``_WrappedModel`` does);
* continuous-time schedules: t in (0, 1] fed as float32 ``1000 * t``.

All tensors of a [`Schedule`][timestep_embed.ddpm.Schedule] are float64 on the CPU, so schedules never drift between
float32 and float64 copies; training moves one copy to its device once ([`Schedule.to`][timestep_embed.ddpm.Schedule]).
Coefficients are gathered where the indices are ([`gather`][timestep_embed.ddpm.diffusion.gather]: indices drawn on a
GPU gather from a copy of a CPU table sent there without waiting) and cast to the sample's dtype; a training step and a
sampling step make no host sync.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

import torch

Model = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Prediction = Literal["eps", "v", "flow"]  # what the model outputs: noise, velocity v, or the flow u = eps - x0
ScheduleName = Literal["linear", "cosine"]  # Ho et al. 2020 / Nichol & Dhariwal 2021
IndexSpacing = Literal["evenly", "leading", "trailing"]  # which of the T steps a sampler visits
Sampler = Literal["ddpm", "ddim", "dpm++2m", "heun", "euler", "consistency"]  # samplers.py, solvers.py, consistency.py
Spacing = Literal["evenly", "leading", "trailing", "karras"]  # karras: noise levels, for KARRAS_SAMPLERS only
PREDICTIONS, SCHEDULES, SPACINGS = get_args(Prediction), get_args(ScheduleName), get_args(IndexSpacing)
SAMPLERS = get_args(Sampler)
KARRAS_SAMPLERS = ("dpm++2m", "heun")  # the samplers that take noise levels, not step indices


@dataclass(frozen=True, eq=False)  # eq=False: tensors have no single truth value
class Schedule:
    """A discretised noise schedule of ``T`` steps.

    betas: float64 [T]; model_t: float64 [T], the time value the model gets at index i;
    integer_time: feed ``model_t`` as int64 (discrete) rather than float32 (continuous);
    continuous: None, or the name of the continuous abar(t) ("linear"/"cosine") used in training.
    """

    betas: torch.Tensor
    model_t: torch.Tensor
    integer_time: bool = True
    continuous: str | None = None
    beta_range: tuple[float, float] = (1e-4, 0.02)  # only used by the continuous linear abar(t)
    alphas: torch.Tensor = field(init=False, repr=False)
    alphas_cumprod: torch.Tensor = field(init=False, repr=False)
    alphas_cumprod_prev: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        betas = self.betas.detach().to("cpu", torch.float64)
        if betas.ndim != 1 or len(betas) == 0 or not bool(((betas > 0) & (betas <= 1)).all()):
            raise ValueError(f"betas must be a non-empty 1-D tensor in (0, 1], got {self.betas!r}")
        alphas_cumprod = torch.cumprod(1.0 - betas, 0)
        set_ = object.__setattr__  # frozen dataclass: derived fields are set once, here
        set_(self, "betas", betas)
        set_(self, "model_t", self.model_t.detach().to("cpu", torch.float64))
        set_(self, "alphas", 1.0 - betas)
        set_(self, "alphas_cumprod", alphas_cumprod)
        set_(self, "alphas_cumprod_prev", torch.cat([alphas_cumprod.new_ones(1), alphas_cumprod[:-1]]))

    @classmethod
    def from_alphas_cumprod(cls, alphas_cumprod, model_t=None, integer_time: bool = True) -> Schedule:
        """A schedule with the given abar [T] (e.g. diffusers' float32 ``scheduler.alphas_cumprod``,
        so that both codes run on identical numbers); ``model_t`` defaults to the indices 0..T-1."""
        abar = torch.as_tensor(alphas_cumprod).detach().to("cpu", torch.float64)
        betas = 1 - abar / torch.cat([abar.new_ones(1), abar[:-1]])
        return cls(betas, torch.arange(len(abar), dtype=torch.float64) if model_t is None else model_t, integer_time)

    def to(self, device: torch.device | str) -> Schedule:
        """This schedule with its tables on ``device`` (float64; float32 on MPS), for a training loop: its steps then
        gather from the device's copy and send nothing from the host (a step captured as a CUDA graph must not); so do
        the samplers' steps."""
        moved, device = copy.copy(self), torch.device(device)
        for name in ("betas", "model_t", "alphas", "alphas_cumprod", "alphas_cumprod_prev"):
            object.__setattr__(moved, name, to_device(getattr(self, name), device, wide_dtype(device)))
        return moved

    @property
    def T(self) -> int:  # noqa: N802 - the paper's symbol
        return len(self.betas)

    def time_for_model(self, i: torch.Tensor | int, batch: int | None = None, device=None) -> torch.Tensor:
        """``t_model`` [B] for schedule indices ``i`` ([B] int64 tensor on any device, gathered there, or an int
        broadcast to ``batch``, read where the tables are), on ``device`` (default: where ``i`` or the tables are)."""
        if isinstance(i, int):  # a view where the tables are: a schedule moved to a device sends nothing from the host
            t = self.model_t[i]
        else:
            t = gather(self.model_t, torch.as_tensor(i, dtype=torch.long))
        t = t.expand(batch) if t.ndim == 0 and batch is not None else t
        t = t.round().long() if self.integer_time else t.float()
        return t if device is None else to_device(t, device)

    def alpha_bar_at(self, t: torch.Tensor) -> torch.Tensor:
        """Continuous abar(t) for t in [0, 1] (float64; float32 on MPS), for schedules built with continuous=True."""
        t = t.to(wide_dtype(t.device))
        if self.continuous == "linear":
            # Continuous limit of Ho's linear schedule = the VP SDE of Song et al. 2021 (eq. 33):
            # log abar(t) = -(b_min t + (b_max - b_min) t^2 / 2) with b = T * beta, T = 1000.
            b_min, b_max = (1000 * b for b in self.beta_range)
            return torch.exp(-(b_min * t + 0.5 * (b_max - b_min) * t**2))
        if self.continuous == "cosine":
            return _cosine_alpha_bar(t) / _cosine_alpha_bar(torch.zeros_like(t))
        raise ValueError(f"alpha_bar_at needs a continuous schedule, this one is {self.continuous!r}")


def _cosine_alpha_bar(t: torch.Tensor, s: float = 0.008) -> torch.Tensor:
    # Nichol & Dhariwal 2021, eq. 17 (f(t), without the division by f(0)); clamped away from 0 at t=1.
    return (torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2).clamp(min=1e-12)


def linear_betas(T: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02) -> torch.Tensor:  # noqa: N803
    """Ho et al. 2020, Sec. 4: betas linear from 1e-4 to 0.02 over T = 1000 steps (float64 [T])."""
    return torch.linspace(beta_start, beta_end, T, dtype=torch.float64)


def cosine_betas(T: int = 1000, max_beta: float = 0.999) -> torch.Tensor:  # noqa: N803
    """Nichol & Dhariwal 2021, eq. 17: beta_t = min(1 - abar(t/T) / abar((t-1)/T), 0.999) (float64 [T])."""
    points = torch.arange(T + 1, dtype=torch.float64) / T
    f = _cosine_alpha_bar(points)
    return (1 - f[1:] / f[:-1]).clamp(max=max_beta)


def make_schedule(
    schedule: str = "linear",
    num_timesteps: int = 1000,
    beta_start: float = 1e-4,
    beta_end: float = 0.02,
    continuous: bool = False,
) -> Schedule:
    """Build a linear or cosine [`Schedule`][timestep_embed.ddpm.Schedule] of ``num_timesteps`` steps.

    With ``continuous=True`` the schedule is the continuous abar(t), t in [0, 1], sampled at the points
    t_i = (i + 1) / T; the model is fed ``1000 * t_i`` (float), and [`training_loss`][timestep_embed.ddpm.training_loss]
    draws t ~ U(1/T, 1) instead of an index.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r} is not one of {SCHEDULES}")
    if not isinstance(num_timesteps, int) or num_timesteps < 1:
        raise ValueError(f"num_timesteps={num_timesteps!r} must be a positive int")
    T = num_timesteps  # noqa: N806
    if not continuous:
        betas = linear_betas(T, beta_start, beta_end) if schedule == "linear" else cosine_betas(T)
        return Schedule(betas, torch.arange(T, dtype=torch.float64))
    proto = Schedule(torch.full((1,), 0.5), torch.zeros(1), False, schedule, (beta_start, beta_end))
    t = torch.arange(1, T + 1, dtype=torch.float64) / T
    abar = proto.alpha_bar_at(t).clamp(min=1e-12)
    betas = 1 - abar / torch.cat([abar.new_ones(1), abar[:-1]])
    return Schedule(betas, 1000 * t, False, schedule, (beta_start, beta_end))


def schedule_from_config(cfg) -> Schedule:
    """[`make_schedule`][timestep_embed.ddpm.make_schedule] from any object with the fields of
    ``config.DiffusionConfig``."""
    return make_schedule(cfg.schedule, cfg.num_timesteps, cfg.beta_start, cfg.beta_end, cfg.continuous)


def timestep_subsequence(T: int, steps: int, spacing: str = "evenly") -> torch.Tensor:  # noqa: N803
    """Ascending int64 indices of ``steps`` of the ``T`` steps.

    "evenly": round(linspace(0, T-1, steps)), includes 0 and T-1 (improved-diffusion ``space_timesteps``);
    "leading": arange(steps) * (T // steps) (diffusers' default); "trailing": diffusers' ``round(np.arange(T, 0,
    -T/steps)) - 1``, the first ``steps`` values of it (numpy's float range holds one more for some counts, 62 of
    the 1000 at T = 1000, the last at index -1).
    """
    if not isinstance(steps, int) or not 1 <= steps <= T:
        raise ValueError(f"steps={steps!r} must be an int in [1, {T}]")
    if spacing == "evenly":
        idx = torch.tensor([T - 1]) if steps == 1 else torch.linspace(0, T - 1, steps, dtype=torch.float64)
    elif spacing == "leading":
        idx = torch.arange(steps) * (T // steps)
    elif spacing == "trailing":
        delta = (T - T / steps) - T  # numpy's arange steps by its first two values' difference, rounded
        idx = (T + torch.arange(steps, dtype=torch.float64) * delta).round() - 1
    else:
        raise ValueError(f"spacing={spacing!r} is not one of {SPACINGS}")
    return idx.to(torch.float64).round().long().unique(sorted=True)


def respace(schedule: Schedule, timesteps: torch.Tensor) -> Schedule:
    """Keep only ``timesteps`` (ascending indices): betas recomputed so abar is unchanged at the kept
    steps, beta'_k = 1 - abar[t_k] / abar[t_{k-1}] (improved-diffusion ``respace.py``); ``model_t``
    keeps the ORIGINAL time values."""
    ts = torch.as_tensor(timesteps, dtype=torch.long).cpu()
    if ts.ndim != 1 or len(ts) == 0 or bool((ts[1:] <= ts[:-1]).any()) or ts[0] < 0 or ts[-1] >= schedule.T:
        raise ValueError(f"timesteps must be strictly increasing indices in [0, {schedule.T}), got {ts}")
    abar = schedule.alphas_cumprod[ts]
    betas = 1 - abar / torch.cat([abar.new_ones(1), abar[:-1]])
    return Schedule(betas, schedule.model_t[ts], schedule.integer_time, schedule.continuous, schedule.beta_range)


def wide_dtype(device: torch.device) -> torch.dtype:
    """float64, the schedule's precision, on every device that has it (Apple's MPS has no float64: float32)."""
    return torch.float32 if device.type == "mps" else torch.float64


def to_device(t: torch.Tensor, device: torch.device | str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``t`` on ``device`` (in ``dtype``). A copy from the CPU to CUDA does not wait for the device's queued work
    (CUDA stages pageable memory at once); every other copy blocks: a non-blocking copy to the host may return before
    its data is there, and one to MPS may read memory already freed (pytorch/pytorch#139550)."""
    device = torch.device(device)
    return t.to(device, dtype, non_blocking=t.device.type == "cpu" and device.type == "cuda")


def gather(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[index]`` computed where ``index`` is: a float64 CPU table [T] (a schedule's) is sent to the index's
    device ([`to_device`][timestep_embed.ddpm.diffusion.to_device]), so indices drawn on a GPU gather with no host
    sync; on the CPU it is the plain gather."""
    if index.device.type == "cpu":
        return table[index]
    return to_device(table, index.device, wide_dtype(index.device))[index]


def coef(values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """float64 [B] -> [B, 1, ..., 1] in x's dtype and device (for broadcasting over x); cast where ``values`` are,
    then sent to x's device ([`to_device`][timestep_embed.ddpm.diffusion.to_device])."""
    return to_device(values.to(dtype=x.dtype), x.device).reshape(-1, *([1] * (x.ndim - 1)))


def q_sample(x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor, schedule: Schedule) -> torch.Tensor:
    """Forward process, Ho et al. eq. 4: x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) eps. t: int64 [B] indices."""
    abar = gather(schedule.alphas_cumprod, t)
    return coef(abar.sqrt(), x0) * x0 + coef((1 - abar).sqrt(), x0) * noise


def predict_x0_eps(out: torch.Tensor, x_t: torch.Tensor, abar: torch.Tensor, prediction: str = "eps"):
    """(x0_hat, eps_hat) from the model output ``out``; ``abar`` float64 [B] (or [1]).

    eps-prediction: x0 = (x_t - sqrt(1 - abar) eps) / sqrt(abar) (Ho et al. eq. 15).
    v-prediction (Salimans & Ho 2022, v = sqrt(abar) eps - sqrt(1 - abar) x0):
    x0 = sqrt(abar) x_t - sqrt(1 - abar) v,  eps = sqrt(abar) v + sqrt(1 - abar) x_t."""
    a, s = coef(abar.sqrt(), x_t), coef((1 - abar).sqrt(), x_t)
    if prediction == "eps":
        return (x_t - s * out) / a, out
    if prediction == "v":
        return a * x_t - s * out, a * out + s * x_t
    raise ValueError(f"prediction={prediction!r} is not one of {PREDICTIONS}")


def randn(shape, generator: torch.Generator | None, like: torch.Tensor) -> torch.Tensor:
    # Drawn on the generator's device, then moved, as diffusers' randn_tensor: same numbers as diffusers.
    device = generator.device if generator is not None else like.device
    return to_device(torch.randn(shape, generator=generator, device=device, dtype=like.dtype), like.device)


def log_sigma_table(schedule: Schedule) -> torch.Tensor:
    """ln sigma_VE = 0.5 ln((1 - abar) / abar) at each of the schedule's steps (float64 [T], ascending)."""
    abar = schedule.alphas_cumprod
    return 0.5 * ((1 - abar) / abar).log()


def index_at_sigma(schedule: Schedule, sigma: torch.Tensor) -> torch.Tensor:
    """The fractional indices (float64 [B], float32 on MPS, on sigma's device) where the schedule's ln sigma_VE
    reaches ln ``sigma`` [B], linear between neighbouring steps and clamped to [0, T - 1] (diffusers'
    ``_sigma_to_t``, k-diffusion's ``sigma_to_t``)."""
    wide = wide_dtype(sigma.device)
    log_sigma = sigma.detach().to(wide).clamp(min=torch.finfo(wide).tiny).log()
    if schedule.T == 1:
        return torch.zeros_like(log_sigma)
    table = to_device(log_sigma_table(schedule), sigma.device, wide)
    hi = torch.searchsorted(table, log_sigma).clamp(1, schedule.T - 1)
    w = ((log_sigma - table[hi - 1]) / (table[hi] - table[hi - 1])).clamp(0, 1)
    return (hi - 1).to(wide) + w


def draw_timesteps(
    schedule: Schedule, batch: int, generator: torch.Generator | None, device, lognormal: tuple[float, float] | None
) -> torch.Tensor:
    """Training's noise levels, int64 [batch] indices of a discrete ``schedule``: uniform over the T steps
    (Ho et al. Algorithm 1) when ``lognormal`` is None, else log-normal in sigma = sqrt((1 - abar) /
    abar), ln sigma ~ N(mean, std^2) (Karras et al. 2022, "EDM", sec. 5: mean -1.2, std 1.2), each draw
    taken to the step whose ln sigma is nearest."""
    if lognormal is None:
        return torch.randint(0, schedule.T, (batch,), generator=generator, device=device)
    mean, std = lognormal
    wide = wide_dtype(torch.device(device))
    log_sigma = mean + std * torch.randn(batch, generator=generator, device=device, dtype=wide)
    table = to_device(log_sigma_table(schedule), device, wide)  # ascending
    upper = torch.searchsorted(table, log_sigma).clamp(1, schedule.T - 1)
    nearer_lower = (log_sigma - table[upper - 1]) < (table[upper] - log_sigma)
    return torch.where(nearer_lower, upper - 1, upper)


def training_loss(
    model: Model,
    x0: torch.Tensor,
    schedule: Schedule,
    *,
    generator: torch.Generator | None = None,
    prediction: str = "eps",
    min_snr_gamma: float | None = None,
    lognormal: tuple[float, float] | None = None,
    t: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
) -> torch.Tensor:
    """Ho et al. Algorithm 1: t ~ U{0..T-1}, eps ~ N(0, I), loss = ||target - model(x_t, t)||^2.

    Target eps (``prediction="eps"``) or v; ``prediction="flow"`` is rectified flow instead, see
    [`flow_matching_loss`][timestep_embed.ddpm.diffusion.flow_matching_loss] (the schedule is not used). Per-sample MSE
    over pixels, then the batch mean, in float32. ``min_snr_gamma``: Min-SNR-gamma weighting (Hang et al. 2023): w =
    min(SNR, gamma) / SNR for eps and min(SNR, gamma) / (SNR + 1) for v. Continuous schedules draw t ~ U(1/T, 1) (``t``
    then holds floats). ``lognormal``: (mean, std) of ln sigma to draw t from instead
    ([`draw_timesteps`][timestep_embed.ddpm.diffusion.draw_timesteps]; discrete schedules). ``t`` and ``noise`` may be
    passed to make the draw explicit (tests, resume).
    """
    if prediction not in PREDICTIONS:
        raise ValueError(f"prediction={prediction!r} is not one of {PREDICTIONS}")
    if prediction == "flow":
        return flow_matching_loss(model, x0, generator=generator, t=t, noise=noise)
    B, dev = x0.shape[0], generator.device if generator is not None else x0.device  # noqa: N806
    if schedule.continuous is None:
        if t is None:
            t = draw_timesteps(schedule, B, generator, dev, lognormal)
        abar, t_model = gather(schedule.alphas_cumprod, t), schedule.time_for_model(t)
    else:
        wide = wide_dtype(torch.device(dev))
        if t is None:
            t = torch.rand(B, generator=generator, device=dev, dtype=wide)
            t = 1.0 / schedule.T + (1 - 1.0 / schedule.T) * t
        t64 = t.to(wide)
        abar, t_model = schedule.alpha_bar_at(t64).clamp(min=1e-12), (1000 * t64).float()
    if noise is None:
        noise = randn(x0.shape, generator, x0)
    x_t = coef(abar.sqrt(), x0) * x0 + coef((1 - abar).sqrt(), x0) * noise
    target = noise if prediction == "eps" else coef(abar.sqrt(), x0) * noise - coef((1 - abar).sqrt(), x0) * x0
    out = model(x_t, to_device(t_model, x0.device)).float()
    per_sample = (out - target.float()).pow(2).flatten(1).mean(1)
    if min_snr_gamma is not None:
        snr = abar / (1 - abar)
        weight = snr.clamp(max=min_snr_gamma) / (snr if prediction == "eps" else snr + 1)
        per_sample = per_sample * to_device(weight.float(), x0.device)
    return per_sample.mean()


def flow_matching_loss(
    model: Model,
    x0: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    t: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rectified flow (Liu et al. 2022; Esser et al. 2024, "SD3", sec. 2-3): x_t = (1 - t) x0 + t eps,
    the model predicts the velocity u = eps - x0 and sees ``1000 t`` (float32, as SD3's scheduler
    timesteps). t ~ logit-normal(0, 1), SD3's choice (sec. 3.1), unless ``t`` (float [B] in (0, 1)) is given."""
    dev = generator.device if generator is not None else x0.device
    wide = wide_dtype(torch.device(dev))
    if t is None:
        t = torch.sigmoid(torch.randn(x0.shape[0], generator=generator, device=dev, dtype=wide))
    t64 = t.to(wide)
    if noise is None:
        noise = randn(x0.shape, generator, x0)
    x_t = coef(1 - t64, x0) * x0 + coef(t64, x0) * noise
    out = model(x_t, to_device((1000 * t64).float(), x0.device)).float()
    return (out - (noise - x0).float()).pow(2).flatten(1).mean(1).mean()
