"""What the sinusoid is fed: the map from a scheduler's time value to the embedding's input."""

from __future__ import annotations

import torch

from ..guards import TimestepsLike

__all__ = ["TIME_INPUTS", "time_input", "check_time_input"]

TIME_INPUTS = {
    # DDPM (diffusion_tf), diffusers' schedulers and UNets, Stable Diffusion, DiT: the integer step
    # index 0..T-1 goes into the sinusoid as it is.
    "identity": "t as is (e.g. the integer step index 0..T-1)",
    # Continuous time t in [0, 1] stretched to the index range: score_sde VP models feed t * 999,
    # flow-matching pipelines (SD3, Flux) feed sigma * 1000.
    "times_T": "t * num_timesteps (t in [0, 1])",
    # improved-/guided-diffusion `GaussianDiffusion._scale_timesteps` with rescale_timesteps=True:
    # t.float() * (1000.0 / num_timesteps), so a 4000-step model sees the range of a 1000-step one.
    "times_1000_over_T": "t * 1000 / num_timesteps",
    # EDM (Karras et al. 2022, Table 1) preconditioning c_noise = ln(sigma) / 4; k-diffusion's
    # Denoiser feeds the same. Here t is sigma > 0.
    "quarter_log": "ln(t) / 4 (t = sigma > 0, EDM c_noise)",
}


def check_time_input(kind, num_timesteps) -> None:
    """ValueError naming the argument unless ``kind`` is in :data:`TIME_INPUTS` and T a positive int."""
    if kind not in TIME_INPUTS:
        raise ValueError(f"time_input must be one of {sorted(TIME_INPUTS)}, got {kind!r}")
    if isinstance(num_timesteps, bool) or not isinstance(num_timesteps, int) or num_timesteps < 1:
        raise ValueError(f"num_timesteps must be a positive int, got {num_timesteps!r}")


def time_input(t: TimestepsLike, kind: str = "identity", num_timesteps: int = 1000) -> TimestepsLike:
    """Map a time value ``t`` ``[...]`` to what the embedding is fed (``kind``: see :data:`TIME_INPUTS`).

    ``"identity"`` returns ``t`` unchanged; the others return a floating tensor ``[...]``:
    ``t * num_timesteps``, ``t.float() * (1000 / num_timesteps)`` or ``ln(t) * 0.25``.
    """
    check_time_input(kind, num_timesteps)
    if kind == "identity":
        return t
    t = torch.as_tensor(t)
    if kind == "times_1000_over_T":
        return t.float() * (1000.0 / num_timesteps)
    t = t if t.is_floating_point() else t.float()
    if kind == "times_T":
        return t * float(num_timesteps)
    return t.log() * 0.25  # == ln(t) / 4 exactly (a power-of-two scaling)
