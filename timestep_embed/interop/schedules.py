"""The raw values a family's sampler produces over one real sampling run, in plain torch (no diffusers):
the arithmetic of diffusers' schedulers' ``set_timesteps`` (tested equal to diffusers' own where it is
installed) and of EDM's Karras grid. `schedule_for` picks a family's run from its contract."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from ..families import TimestepContract

__all__ = ["Schedule", "ddpm", "ddim", "euler_leading", "dpm_linspace", "flow", "karras", "schedule_for", "SCHEDULES"]

T = 1000  # num_train_timesteps


def ddpm(steps: int = T) -> torch.Tensor:
    """DDPMScheduler.set_timesteps(steps): every step of the chain, T - 1 .. 0 (int64)."""
    ratio = T // steps
    return torch.from_numpy((np.arange(0, steps) * ratio).round()[::-1].copy().astype(np.int64))


def ddim(steps: int = 50, offset: int = 0) -> torch.Tensor:
    """DDIMScheduler / PNDM with leading spacing: ``arange(steps) * (T // steps) + steps_offset``, reversed."""
    return ddpm(steps) + offset


def euler_leading(steps: int = 30, offset: int = 1) -> torch.Tensor:
    """EulerDiscreteScheduler(timestep_spacing="leading", steps_offset=1): SDXL's float32 integer steps."""
    return ddim(steps, offset).float()


def dpm_linspace(steps: int = 20) -> torch.Tensor:
    """DPMSolverMultistepScheduler (linspace spacing): ``linspace(0, T - 1, steps + 1).round()`` reversed."""
    return torch.from_numpy(np.linspace(0, T - 1, steps + 1).round()[::-1][:-1].copy().astype(np.int64))


def flow(steps: int = 28, shift: float = 1.0, mu: float | None = None) -> torch.Tensor:
    """FlowMatchEulerDiscreteScheduler.set_timesteps: sigma * 1000 in float32, shifted by ``shift`` or,
    with ``mu``, by the resolution-dependent exponential shift (Flux: mu = 1.15 at 1024 x 1024)."""
    first = torch.tensor(1.0 / T, dtype=torch.float32)  # __init__'s smallest sigma, shifted in float32
    low = float(first) if mu is not None else float(shift * first / (1 + (shift - 1) * first))
    sigmas = np.linspace(T * 1.0, low * T, steps) / T
    if mu is not None:
        sigmas = math.exp(mu) / (math.exp(mu) + (1 / sigmas - 1))
    else:
        sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)
    return torch.from_numpy(sigmas).to(torch.float32) * T


def karras(steps: int = 18, sigma_min: float = 0.002, sigma_max: float = 80.0, rho: float = 7.0) -> torch.Tensor:
    """EDM's noise levels (Karras et al. 2022, eq. 5), float64 as EDM's sampler forms them."""
    i = torch.arange(steps, dtype=torch.float64)
    return (sigma_max ** (1 / rho) + i / (steps - 1) * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))) ** rho


@dataclass(frozen=True)
class Schedule:
    """One sampling run: its description and the function that gives its raw values."""

    description: str
    make: Callable[[], torch.Tensor] = field(repr=False, compare=False)

    def values(self) -> torch.Tensor:
        return self.make()


# a family's usual run; the others by the contract's raw range (see schedule_for)
SCHEDULES: dict[str, Schedule] = {
    "ddpm": Schedule("DDPMScheduler, all 1000 steps", ddpm),
    "stable_diffusion": Schedule("DDIMScheduler, 50 steps, leading, steps_offset=1", lambda: ddim(50, 1)),
    "sdxl": Schedule("EulerDiscreteScheduler, 30 steps, leading, steps_offset=1", euler_leading),
    "pixart": Schedule("DPMSolverMultistepScheduler, 20 steps", dpm_linspace),
    "sd3": Schedule("FlowMatchEulerDiscreteScheduler, 28 steps, shift 3.0", lambda: flow(28, 3.0)),
    "flux_dev": Schedule("FlowMatchEulerDiscreteScheduler, 28 steps, mu 1.15 (1024 x 1024)", lambda: flow(28, mu=1.15)),
    "flux_schnell": Schedule("FlowMatchEulerDiscreteScheduler, 4 steps, no shift", lambda: flow(4)),
    "flux2": Schedule("FlowMatchEulerDiscreteScheduler, 50 steps, mu 1.15", lambda: flow(50, mu=1.15)),
    "wan21": Schedule("flow matching, 50 steps, shift 5.0 (UniPC flow sigmas)", lambda: flow(50, 5.0)),
    "hunyuan_video": Schedule("FlowMatchEulerDiscreteScheduler, 50 steps, shift 7.0", lambda: flow(50, 7.0)),
    "edm": Schedule("EDM's Heun sampler, 18 Karras sigmas in [0.002, 80]", karras),
    "edm_vp": Schedule("EDM's Heun sampler, 18 Karras sigmas in [0.002, 80]", karras),
    "edm_ve": Schedule("EDM's Heun sampler, 18 Karras sigmas in [0.02, 100]", lambda: karras(18, 0.02, 100.0)),
}


def schedule_for(contract: TimestepContract) -> Schedule:
    """The run of `SCHEDULES` for the contract's family; else one that fits its raw range:
    integer steps: DDIM, 50 steps; sigma * 1000: flow matching, 28 steps, shift 3.0; a unit range:
    the same flow run / 1000; noise levels: 18 Karras sigmas over the range."""
    if contract.name in SCHEDULES:
        return SCHEDULES[contract.name]
    low, high = contract.raw_range
    if isinstance(low, int) and isinstance(high, int):
        return Schedule("DDIMScheduler, 50 steps, leading (the family's own run is not in SCHEDULES)", ddim)
    if (low, high) == (0.0, 1000.0):
        return Schedule("FlowMatchEulerDiscreteScheduler, 28 steps, shift 3.0 (a typical flow run)", flow_default)
    if (low, high) == (0.0, 1.0):
        return Schedule("flow matching, 28 steps, shift 3.0, over [0, 1]", lambda: flow_default() / T)
    if low > 0:
        return Schedule(f"18 Karras sigmas in [{low:g}, {high:g}]", lambda: karras(18, float(low), float(high)))
    return Schedule(f"50 values evenly over [{low:g}, {high:g}]", lambda: torch.linspace(high, low, 50))


def flow_default() -> torch.Tensor:
    return flow(28, 3.0)
